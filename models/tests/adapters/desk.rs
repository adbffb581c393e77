//! The research desk the desk tests run: a project's agent files as a user keeps them
//! (`.claude/agents/` and `.pi/agents/`), a `Model` routing the lead and the web researcher
//! to Anthropic and the analyst to an OpenAI-compatible server, and the scripts the routed
//! mock answers them with.

use std::time::Duration;

use agent_tree_actors::{
    BoxFuture, Catalog, FnTool, Model, ModelError, ModelRequest, ModelResponse, RetryPolicy,
    ToolError, Tree, TreeConfig,
};
use agent_tree_models::{Anthropic, OpenAiCompat};
use agent_tree_protocol::{AgentRecord, Event};
use serde_json::{Value, json};

use crate::common::scratch;
use crate::routed::{
    Mock, Req, Resp, an_529, an_calls, an_overloaded_mid_stream, an_text, oa_429, oa_call, oa_text,
};

// ---------------------------------------------------------------------------------------
// The project: agent files as a user keeps them
// ---------------------------------------------------------------------------------------

const LEAD: &str = "---\nname: lead\ndescription: Runs the research desk and splits each question between researchers\ntools: Read, WebSearch\nmodel: opus\nallowedSubagents: [web-researcher, analyst]\nmaxTurns: 12\ncolor: purple\n---\n[agent:lead] You run the research desk. Delegate, then write the report.\n";
pub(crate) const WEB: &str = "---\nname: web-researcher\ndescription: Reads press coverage and documentation on the web\ntools: WebFetch, WebSearch, Read\nmodel: sonnet\ncolor: cyan\n---\n[agent:web-researcher] You research on the web and quote your sources.\n";
pub(crate) const ANALYST: &str = "---\nname: analyst\ndescription: Computes figures from the CSV exports\ntools: read, bash\nmodel: claude-haiku-4-5\nthinking: low\n---\n[agent:analyst] You compute figures from data files.\n";

/// `.claude/agents/` and `.pi/agents/` of a project; `analyst` may be replaced.
pub(crate) fn project(analyst: &str) -> Catalog {
    let root = scratch("desk");
    let claude = root.join(".claude/agents");
    let pi = root.join(".pi/agents");
    std::fs::create_dir_all(&claude).unwrap();
    std::fs::create_dir_all(&pi).unwrap();
    std::fs::write(claude.join("lead.md"), LEAD).unwrap();
    std::fs::write(claude.join("web-researcher.md"), WEB).unwrap();
    std::fs::write(pi.join("analyst.md"), analyst).unwrap();
    let loaded = Catalog::load_dirs([&claude, &pi]);
    assert!(loaded.is_clean(), "{:?}", loaded.problems);
    loaded.catalog
}

/// The lead and the web researcher on Anthropic, the analyst on an OpenAI-compatible server
/// (say Ollama): routed by agent type, as `docs/models.md` suggests.
pub(crate) struct Desk {
    claude: Anthropic,
    local: OpenAiCompat,
}

impl Model for Desk {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        if request.agent_type() == "analyst" {
            self.local.turn(request)
        } else {
            self.claude.turn(request)
        }
    }
}

pub(crate) fn desk(mock: &Mock) -> Desk {
    Desk {
        claude: Anthropic::builder()
            .base_url(&mock.base)
            .api_key("sk-ant-test")
            .model_alias("opus", "claude-opus-4-1")
            .model_alias("sonnet", "claude-sonnet-4-5")
            .streaming(true)
            .build()
            .unwrap(),
        local: OpenAiCompat::builder()
            .base_url(&mock.base)
            .model_alias("claude-haiku-4-5", "qwen2.5:7b")
            .streaming(true)
            .build()
            .unwrap(),
    }
}

pub(crate) fn config() -> TreeConfig {
    TreeConfig::default()
        .with_retry(
            RetryPolicy::default()
                .with_max_attempts(3)
                .with_backoff(Duration::from_millis(2), Duration::from_millis(5)),
        )
        .with_stream_events(true)
}

pub(crate) fn read_tool() -> impl agent_tree_actors::Tool {
    FnTool::new(
        "read",
        "Reads a file of the project",
        |_ctx, input: Value| async move {
            let path = input["path"].as_str().unwrap_or_default().to_owned();
            if path == "q3.csv" {
                Ok::<String, ToolError>("region,revenue\nEMEA,12\nAPAC,9\n".into())
            } else {
                Err(ToolError::new(format!("no such file: {path}")))
            }
        },
    )
}

pub(crate) fn find(tree: &Tree, agent_type: &str) -> AgentRecord {
    tree.snapshot()
        .agents()
        .find(|r| r.agent_type == agent_type)
        .cloned()
        .unwrap_or_else(|| panic!("no {agent_type} record"))
}

/// Every event queued now.
pub(crate) fn drain(events: &mut agent_tree_actors::EventStream) -> Vec<Event> {
    events.drain()
}

// ---------------------------------------------------------------------------------------
// The scripts: what each agent of the desk is answered
// ---------------------------------------------------------------------------------------

/// The lead's script: decided from what it was sent, since its turns depend on when its
/// background children's notices and questions arrive.
fn lead_script(req: &Req, attempt: usize) -> Resp {
    let pending = req.pending();
    let ids = req.spawned_ids();
    if req.turn() == 1 && attempt == 0 {
        // The provider is overloaded once (HTTP 529), then answers.
        return an_529();
    }
    if req.turn() == 0 {
        return an_calls(
            &[
                (
                    "Agent",
                    json!({"agent_type":"analyst","prompt":"Compute Q3 revenue by region from q3.csv","description":"Q3 revenue","background":true}),
                ),
                (
                    "Agent",
                    json!({"agent_type":"web-researcher","prompt":"Find the press coverage of our Q3 results","description":"Q3 press","background":true}),
                ),
            ],
            120,
            40,
        );
    }
    // The resume of the lead by the application (a second question).
    if pending.contains("Now break APAC down by country") {
        return an_calls(
            &[(
                "Agent",
                json!({"agent_type":"analyst","resume":ids[0],"prompt":"Break APAC down by country"}),
            )],
            100,
            10,
        );
    }
    if pending.contains("ANALYST-APAC-DONE") {
        return an_text("DESK REPORT 2: APAC by country attached", 100, 10);
    }
    let question =
        pending.contains("asking") || pending.contains("\\\"notice\\\":\\\"question\\\"");
    if question && !req.text().contains("WEB-DONE") {
        return an_calls(
            &[(
                "steer_subagent",
                json!({"agent_id": ids[1], "message": "EMEA only, last 30 days"}),
            )],
            100,
            10,
        );
    }
    let text = req.text();
    if text.contains("ANALYST-DONE") && text.contains("WEB-DONE") {
        return an_text("DESK REPORT: EMEA 12 (press positive), APAC 9", 100, 10);
    }
    an_calls(
        &[("wait_subagents", json!({"agent_ids": [ids[0], ids[1]]}))],
        100,
        10,
    )
}

pub(crate) fn desk_script(req: &Req, attempt: usize) -> Resp {
    match (req.agent().as_str(), req.turn(), attempt) {
        ("lead", ..) => lead_script(req, attempt),
        // The web researcher: overloaded mid-stream after some text, then asks its owner.
        ("web-researcher", 0, 0) => an_overloaded_mid_stream(200),
        ("web-researcher", 0, _) => an_calls(
            &[(
                "ask_owner",
                json!({"question":"Which region should I focus on?"}),
            )],
            210,
            15,
        ),
        ("web-researcher", _, _) => an_text("WEB-DONE: EMEA press was positive", 220, 25),
        // The analyst: rate-limited once, then reads the CSV, then answers; resumed later.
        ("analyst", 0, 0) => oa_429(),
        ("analyst", 0, _) => oa_call("read", json!({"path":"q3.csv"}), 300, 30),
        ("analyst", 1, _) => oa_text("ANALYST-DONE: EMEA 12, APAC 9", 350, 20),
        ("analyst", _, _) => oa_text("ANALYST-APAC-DONE: JP 5, AU 4", 400, 20),
        (other, ..) => Resp::json(
            500,
            json!({"error":{"message":format!("unscripted {other}")}}),
        ),
    }
}

/// A tree of the desk on `mock`, with `analyst` as the analyst's pi file.
pub(crate) async fn desk_tree(mock: &Mock, analyst: &str) -> Tree {
    Tree::builder()
        .config(config())
        .catalog(project(analyst))
        .model(desk(mock))
        .tool(read_tool())
        .unwrap()
        .build()
        .await
        .unwrap()
}
