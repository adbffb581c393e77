//! Review 21: hostile inputs from a model and from the application. Each `dN_` test is a
//! defect (it fails against the code it was written for); `guard_` tests pass and hold
//! behaviour worth keeping.

use std::time::Duration;

use agent_tree::ControlError;
use agent_tree::prelude::*;
use agent_tree::protocol::{ToolCall, WaitPolicy};
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{BoxFuture, JournalConfig};
use serde_json::{Value, json};

use crate::support::harness::{GUARD, a};
use crate::support::journal::TempDir;
use crate::support::{catalog, leaf};

/// An array nested `depth` deep around `1`.
fn nested(depth: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..depth {
        value = Value::Array(vec![value]);
    }
    value
}

// ---- d1: a shutdown grace of Duration::MAX --------------------------------------------

/// D1. `TreeConfig::validate` accepts any non-zero `shutdown_grace` (a "wait as long as it
/// takes" grace of `Duration::MAX` among them), and `Tree::shutdown` then computes
/// `Instant::now() + grace`, which panics on overflow. Nothing a user sets may panic.
#[tokio::test(start_paused = true)]
async fn d1_a_shutdown_grace_of_duration_max_does_not_panic_the_shutdown() {
    let config = TreeConfig::default().with_shutdown_grace(Duration::MAX);
    assert!(config.validate().is_ok(), "the config is accepted");
    let tree = Tree::builder()
        .config(config)
        .catalog(catalog([leaf("w")]))
        .model(ScriptedModel::new().script("w", Script::new([Turn::answer("done")])))
        .build()
        .await
        .expect("the tree builds");
    let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    assert!(handle.outcome().await.is_completed());
    let joined = tokio::spawn(async move { tree.shutdown().await }).await;
    assert!(
        joined.is_ok(),
        "d1: Tree::shutdown with a shutdown_grace the config accepted panicked: {:?}",
        joined.err()
    );
}

// ---- d2: Tree::wait with the root in a fail_fast set ----------------------------------

/// D2. `Tree::abort(a0)` is refused (the root is not an agent the application aborts), but
/// `Tree::wait(&[a0, x], FailFast)` aborts `a0` when `x` fails: the root's token is
/// cancelled, every agent of the tree (none of them in the set) is aborted, and every agent
/// started afterwards is born cancelled. `fail_fast` aborts only the set.
#[tokio::test(start_paused = true)]
async fn d2_a_fail_fast_wait_naming_the_root_aborts_nothing_outside_the_set() {
    let model = ScriptedModel::new()
        .script(
            "failer",
            Script::new([Turn::fail("boom").after(Duration::from_millis(10))]),
        )
        .script(
            "bystander",
            Script::new([Turn::answer("still here").after(Duration::from_secs(5))]),
        )
        .script("later", Script::new([Turn::answer("later done")]));
    let tree = Tree::builder()
        .catalog(catalog([leaf("failer"), leaf("bystander"), leaf("later")]))
        .model(model)
        .build()
        .await
        .expect("the tree builds");
    let bystander = tree
        .spawn(SpawnRequest::new("bystander", "wait"))
        .await
        .unwrap();
    let failer = tree
        .spawn(SpawnRequest::new("failer", "fail"))
        .await
        .unwrap();
    // The root never settles before a shutdown: the wait is bounded.
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        tree.wait(&[AgentId::ROOT, failer.id()], WaitPolicy::FailFast),
    )
    .await;
    let mut bystander = bystander;
    let got = tokio::time::timeout(GUARD, bystander.outcome())
        .await
        .unwrap();
    assert!(
        got.is_completed(),
        "d2: an agent outside the fail_fast set was ended: {got:?}\n{}",
        tree.snapshot().render_text()
    );
    let mut later = tree.spawn(SpawnRequest::new("later", "go")).await.unwrap();
    let got = tokio::time::timeout(GUARD, later.outcome()).await.unwrap();
    assert!(
        got.is_completed(),
        "d2: an agent started after the wait was born aborted: {got:?}"
    );
    tree.shutdown().await;
}

// ---- d3: a deeply nested tool input in a journaled conversation ------------------------

/// A model whose first turn calls tool `probe` with an input nested `depth` deep (what an
/// adapter parses from a provider's arguments string, well within `serde_json`'s limit of
/// 128), and whose second answers.
#[derive(Clone, Debug)]
struct DeepCall {
    depth: usize,
}

impl Model for DeepCall {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            if request.turn == 1 {
                let input = json!({ "payload": nested(self.depth) });
                Ok(ModelResponse::calls(vec![ToolCall::new(
                    "c1", "probe", input,
                )]))
            } else {
                Ok(ModelResponse::text("done"))
            }
        })
    }
}

/// D3. A model's tool input nested 126 deep (an OpenAI adapter parses such `arguments`
/// without complaint: `serde_json`'s limit is 128) is kept in the conversation as a `Deep`
/// input and written into the journal's `conversation` line, which wraps it in five more
/// levels: the line is past the reader's limit, so a tree built on that journal is refused
/// ("recursion limit exceeded"). A model's input makes the journal unrecoverable.
#[tokio::test(start_paused = true)]
async fn d3_a_deeply_nested_tool_input_does_not_make_the_journal_unreadable() {
    // What a provider adapter would hand over: text parsed by serde_json.
    let text = serde_json::to_string(&json!({ "payload": nested(125) })).unwrap();
    assert!(
        serde_json::from_str::<Value>(&text).is_ok(),
        "a model can send it"
    );
    let dir = TempDir::new("review21-deep");
    let path = dir.file("tree.journal");
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(DeepCall { depth: 125 })
        .journal(JournalConfig::new(&path))
        .build()
        .await
        .expect("the tree builds");
    let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    let got = tokio::time::timeout(GUARD, handle.outcome()).await.unwrap();
    assert!(got.is_completed(), "{got:?}");
    tree.shutdown().await;
    drop(tree);
    let reopened = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(DeepCall { depth: 125 })
        .journal(JournalConfig::new(&path))
        .build()
        .await;
    assert!(
        reopened.is_ok(),
        "d3: a journal holding a model's deeply nested tool input cannot be recovered: {}",
        reopened.err().map(|e| e.to_string()).unwrap_or_default()
    );
    let tree = reopened.unwrap();
    assert_eq!(
        tree.record(a(1)).map(|r| r.status),
        Some(AgentStatus::Completed)
    );
    tree.shutdown().await;
}

// ---- d4: a type name the catalog takes, the Agent tool lists, and a model cannot spawn --

/// D4. `Catalog::new` (and the file loader: the same check) accepts a type name of any
/// length, and the owner's `Agent` tool lists it in its `agent_type` enum; but a model's
/// call naming it exactly is refused before resolution, as "agent type name too long"
/// (`MAX_TYPE_NAME` 128 bytes). A type the tool offers must be one the model can start (or
/// the catalog must refuse the name, naming the field).
#[tokio::test(start_paused = true)]
async fn d4_a_listed_type_with_a_long_name_can_be_spawned_by_the_model() {
    let long = format!("worker-{}", "x".repeat(140));
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::calls([Call::spawn(long.clone(), "do it")]),
                Turn::answer("lead done"),
            ]),
        )
        .script(long.clone(), Script::new([Turn::answer("worker done")]));
    let tree = Tree::builder()
        .catalog(catalog([
            crate::support::delegator("lead", &[&long]),
            leaf(&long),
        ]))
        .model(model.clone())
        .build()
        .await
        .expect("the tree builds");
    let mut handle = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let got = tokio::time::timeout(GUARD, handle.outcome()).await.unwrap();
    assert!(got.is_completed(), "{got:?}");
    let offered = model.log_of(a(1))[0].tools.iter().any(|t| t == "Agent");
    assert!(offered, "the lead is offered the Agent tool");
    let result = &crate::support::harness::results(&model, a(1), 1)[0];
    assert!(
        !result.is_error,
        "d4: the lead's Agent call naming a type its tool lists was refused: {}",
        result.content
    );
    tree.shutdown().await;
}

// ---- d5: a whitespace-only resume prompt ------------------------------------------------

/// D5. A blank prompt (empty or whitespace only) is refused whoever sends it, and only an
/// empty prompt resumes "as it was" (semantics: "What a model may set"). A model's
/// `Agent {resume, prompt: "   "}` is neither refused nor taken as empty: the child's next
/// request carries a whitespace-only user message, which a provider may refuse (Anthropic's
/// Messages API does).
#[tokio::test(start_paused = true)]
async fn d5_a_whitespace_resume_prompt_never_reaches_the_model_as_a_message() {
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::calls([Call::spawn("worker", "first task")]),
                Turn::calls([Call::tool(
                    "Agent",
                    json!({ "resume": "a2", "prompt": "   \n\t " }),
                )]),
                Turn::answer("lead done"),
            ]),
        )
        .script(
            "worker",
            Script::new([Turn::answer("first"), Turn::answer("second")]),
        );
    let tree = Tree::builder()
        .catalog(catalog([
            crate::support::delegator("lead", &["worker"]),
            leaf("worker"),
        ]))
        .model(model.clone())
        .build()
        .await
        .expect("the tree builds");
    let mut handle = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let got = tokio::time::timeout(GUARD, handle.outcome()).await.unwrap();
    assert!(got.is_completed(), "{got:?}");
    let resume_result = &crate::support::harness::results(&model, a(1), 2)[0];
    let worker_calls = model.log_of(a(2));
    let blank: Vec<String> = worker_calls
        .iter()
        .flat_map(|c| crate::support::user_texts(&c.messages))
        .filter(|t| t.trim().is_empty())
        .collect();
    assert!(
        blank.is_empty(),
        "d5: a whitespace-only resume prompt reached the worker's model as a user message \
         {blank:?} (the resume answered {})",
        resume_result.content
    );
    tree.shutdown().await;
}

// ---- d6: a cut-off piece joined onto a later, different answer -------------------------

/// Turn 1 is cut off at the length limit ("Part one, "); turn 2 finishes it ("part two.")
/// and takes 10 ms, during which the application steers; turn 3 answers the steer.
#[derive(Clone, Debug)]
struct CutThenSteered;

impl Model for CutThenSteered {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            match request.turn {
                1 => {
                    let mut cut = ModelResponse::text("Part one, ");
                    cut.finish_reason = agent_tree::protocol::FinishReason::Length;
                    Ok(cut)
                }
                2 => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok(ModelResponse::text("part two."))
                }
                _ => Ok(ModelResponse::text("Answer to the steer.")),
            }
        })
    }
}

/// D6. A cut-off piece is kept in `cut_text` until a final answer joins it. When the turn
/// that finishes the cut-off answer is not final (a steer arrived during it: one more turn),
/// its piece is dropped but the earlier piece is kept, and the next turn's answer is
/// appended to it: the outcome is "Part one, Answer to the steer.", a text the model never
/// wrote (half of one answer glued to another). Expected: the last turn's answer, or the
/// whole continued answer, never a splice.
#[tokio::test(start_paused = true)]
async fn d6_a_cut_off_piece_is_not_spliced_onto_a_later_answer() {
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(CutThenSteered)
        .build()
        .await
        .expect("the tree builds");
    let mut handle = tree.spawn(SpawnRequest::new("w", "go")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let receipt = tree.steer(handle.id(), "also say hello").await;
    assert!(receipt.is_ok(), "{receipt:?}");
    let got = tokio::time::timeout(GUARD, handle.outcome()).await.unwrap();
    assert!(got.is_completed(), "{got:?}");
    let text = got.text.clone().unwrap_or_default();
    assert!(
        text == "Answer to the steer." || text == "Part one, part two.Answer to the steer.",
        "d6: the outcome splices a cut-off piece onto a different answer: {text:?}"
    );
    tree.shutdown().await;
}

// ---- d7: an integer past u64 in an agent file -------------------------------------------

/// D7. A malformed agent file's error names the file and the field, and every field error
/// of a file is reported. `max_turns: 4294967296` is a field error ("expected a positive
/// integer, found 4294967296, which is too large"), but `max_turns: 18446744073709551616`
/// (a valid YAML integer, one past u64) is a file-wide "invalid YAML in frontmatter: ...
/// invalid type: integer `...` as u128, expected any YAML value": no field error, a claim
/// that the YAML is invalid, and the other fields' errors (here `isolated`) are not
/// reported. The expansion budget's counting pass refuses the u128 before any field is read.
#[test]
fn d7_an_integer_past_u64_is_a_field_error_of_that_field() {
    use agent_tree::CatalogError;
    let text = "---\nmax_turns: 18446744073709551616\nisolated: maybe\n---\nYou work.\n";
    let err = agent_tree::parse_agent_file(std::path::Path::new("agents/big.md"), text)
        .expect_err("refused");
    let errors: Vec<&CatalogError> = match &err {
        CatalogError::Many(errors) => errors.iter().collect(),
        one => vec![one],
    };
    let fields: Vec<&str> = errors
        .iter()
        .filter_map(|e| match e {
            CatalogError::Field { field, .. } => Some(field.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        fields,
        ["max_turns", "isolated"],
        "d7: an out-of-range integer is not reported as its field's error (and hides the \
         other fields' errors): {err}"
    );
}

// ---- d8: Tree::charge of the root ---------------------------------------------------------

/// D8. The root is not an agent the application controls: `Tree::abort`, `kill`, `steer`
/// and `shutdown_agent` refuse `a0` (`NotYours`), and "the root's only events are its
/// shutdown's (`completing`, then `completed`) or its escalation (`failed`)". But
/// `Tree::charge(a0, usage)` is accepted: the root gets `own` usage no agent spent and a
/// `usage_reported` event of `a0`.
#[tokio::test(start_paused = true)]
async fn d8_charging_the_root_is_refused() {
    let tree = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(ScriptedModel::new())
        .build()
        .await
        .expect("the tree builds");
    let mut events = tree.subscribe();
    let charged = tree.charge(AgentId::ROOT, Usage::tokens(5, 5));
    let root_events: Vec<String> = events
        .drain()
        .into_iter()
        .filter(|e| e.agent == AgentId::ROOT)
        .map(|e| format!("{:?}", e.kind))
        .collect();
    assert!(
        matches!(charged, Err(ControlError::NotYours(_))),
        "d8: Tree::charge(a0) was {charged:?}; the root now has own usage {:?} and events \
         {root_events:?}",
        tree.record(AgentId::ROOT).map(|r| r.own)
    );
    tree.shutdown().await;
}

// ---- d9: a non-journal file without a newline is wiped --------------------------------------

/// D9. A journal path holding a file that is not a journal is refused naming the file
/// (`hello world\n`: "not a journal line (no checksum)"), but the same text without its
/// newline is taken for "a torn header" and the file is truncated: a tree pointed at the
/// wrong file (a key, a minified JSON, any text without a newline) destroys it. Only bytes
/// that could be the start of a header line (or zeros) are a torn header.
#[tokio::test(start_paused = true)]
async fn d9_a_file_that_is_no_journal_is_refused_not_wiped() {
    let dir = TempDir::new("review21-wipe");
    let path = dir.file("settings.json");
    let original = br#"{"api_key":"sk-not-a-journal","region":"eu"}"#;
    std::fs::write(&path, original).unwrap();
    let built = Tree::builder()
        .catalog(catalog([leaf("w")]))
        .model(ScriptedModel::new())
        .journal(JournalConfig::new(&path))
        .build()
        .await;
    let refused = built.is_err();
    if let Ok(tree) = built {
        tree.shutdown().await;
    }
    let now = std::fs::read(&path).unwrap();
    assert!(
        refused && now == original,
        "d9: a file that holds no journal was {} and now reads {:?}",
        if refused {
            "refused"
        } else {
            "taken as a journal"
        },
        String::from_utf8_lossy(&now[..now.len().min(80)])
    );
}

// ---- guards -------------------------------------------------------------------------------

/// Guard: hostile ids a model may write (itself, its owner, the root, a sibling's branch,
/// an overflowing number, a leading zero, upper case, padding, unicode digits, empty) all
/// get the same kind of refusal from every control tool, and none reaches an agent: the
/// lead's only child keeps running to its own answer.
#[tokio::test(start_paused = true)]
async fn guard_hostile_ids_are_refused_alike_by_every_control_tool() {
    let hostile = [
        "a1",
        "a0",
        "a2",
        "a18446744073709551616",
        "a03",
        " A3",
        "a３",
        "",
        "a-3",
        "3",
    ];
    let mut calls = Vec::new();
    for id in hostile {
        calls.push(Call::tool(
            "steer_subagent",
            json!({ "agent_id": id, "message": "hi" }),
        ));
        calls.push(Call::tool("abort_subagent", json!({ "agent_id": id })));
        calls.push(Call::tool("get_subagent_result", json!({ "agent_id": id })));
        calls.push(Call::tool(
            "wait_subagents",
            json!({ "agent_ids": [id, id] }),
        ));
        calls.push(Call::tool(
            "Agent",
            json!({ "resume": id, "prompt": "again" }),
        ));
    }
    let count = calls.len();
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::calls([Call::spawn_background("worker", "work")]),
                Turn::calls(calls),
                Turn::answer("lead done"),
            ]),
        )
        .script(
            "other",
            Script::new([Turn::answer("other done").after(Duration::from_millis(50))]),
        )
        .script(
            "worker",
            Script::new([Turn::answer("worker done").after(Duration::from_millis(100))]),
        );
    let tree = Tree::builder()
        .config(TreeConfig::default().with_max_tool_calls_per_turn(count))
        .catalog(catalog([
            crate::support::delegator("lead", &["worker"]),
            leaf("worker"),
            leaf("other"),
        ]))
        .model(model.clone())
        .build()
        .await
        .expect("the tree builds");
    let mut lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    let mut other = tree.spawn(SpawnRequest::new("other", "go")).await.unwrap();
    assert_eq!((lead.id(), other.id()), (a(1), a(2)));
    let got = tokio::time::timeout(GUARD, lead.outcome()).await.unwrap();
    assert!(got.is_completed(), "{got:?}");
    let results = crate::support::harness::results(&model, a(1), 2);
    assert_eq!(results.len(), count);
    for (i, result) in results.iter().enumerate() {
        let text = crate::support::error_text(&result.content);
        assert!(
            result.is_error && text.starts_with("no subagent ") && text.ends_with(" of yours"),
            "call {i} (id {:?}) got {}",
            hostile[i / 5],
            result.content
        );
    }
    assert!(
        tokio::time::timeout(GUARD, other.outcome())
            .await
            .unwrap()
            .is_completed()
    );
    let worker = tree.record(a(3)).expect("the lead's worker");
    assert_eq!(worker.parent, Some(a(1)));
    tree.shutdown().await;
}

/// Guard: a model's usage near `u64::MAX` saturates everywhere (own, subtree, the root) and
/// the events still sum to the root's total: no panic, no wrap.
#[tokio::test(start_paused = true)]
async fn guard_huge_usage_saturates_and_the_events_still_sum_to_the_total() {
    let huge = Usage::tokens(u64::MAX - 1, u64::MAX - 1);
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::calls([Call::spawn("worker", "w")]).usage(huge),
                Turn::answer("lead done").usage(huge),
            ]),
        )
        .script("worker", Script::new([Turn::answer("done").usage(huge)]));
    let tree = Tree::builder()
        .catalog(catalog([
            crate::support::delegator("lead", &["worker"]),
            leaf("worker"),
        ]))
        .model(model)
        .build()
        .await
        .expect("the tree builds");
    let mut events = tree.subscribe();
    let mut lead = tree.spawn(SpawnRequest::new("lead", "go")).await.unwrap();
    assert!(
        tokio::time::timeout(GUARD, lead.outcome())
            .await
            .unwrap()
            .is_completed()
    );
    let root = tree.record(AgentId::ROOT).unwrap().subtree;
    assert_eq!(root.input_tokens, u64::MAX);
    assert_eq!(crate::support::reported_usage(&events.drain()), root);
    tree.shutdown().await;
}
