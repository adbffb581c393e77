//! What every real-server scenario shares: the adapter for an API, a model that routes some
//! turns to a script and the rest to the server, and the usage check against the server's
//! counters.

use std::sync::Arc;
use std::time::Duration;

use agent_tree_actors::{Catalog, Model, ModelError, ModelRequest, ModelResponse, Tree};
use agent_tree_models::{Anthropic, OpenAiCompat};
use agent_tree_protocol::{AgentDefinition, Message, Sampling, SubagentAllowance, ToolCall, Usage};
use parking_lot::Mutex;
use serde_json::json;

use crate::server::{LlamaServer, ServerTokens};

/// Sampling for every scenario: greedy and short, so runs are quick and repeatable. Gemma
/// 270M is a base model: under the ChatML (Hermes) template it does not end its turn with
/// `<|im_end|>` as a token of its own, and it goes on past its first line, so both end the
/// output.
pub(crate) fn sampling(max_output_tokens: u32) -> Sampling {
    Sampling::default()
        .with_temperature(0.0)
        .with_seed(7)
        .with_stop(["<|im_end|>", "\n"])
        .with_max_output_tokens(max_output_tokens)
}

/// Which of llama-server's two APIs an adapter speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    /// Chat Completions, through `OpenAiCompat` at `<root>/v1`.
    OpenAi,
    /// Messages, through `Anthropic` at the root (the form Anthropic's SDKs use).
    Anthropic,
}

/// How an adapter is built for a scenario.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AdapterShape {
    pub(crate) streaming: bool,
    pub(crate) first_byte: Duration,
    pub(crate) context_window: u32,
}

impl Default for AdapterShape {
    fn default() -> Self {
        AdapterShape {
            streaming: false,
            first_byte: Duration::from_secs(120),
            context_window: 4096,
        }
    }
}

/// The adapter for `api` on `server`.
pub(crate) fn adapter(api: Api, server: &LlamaServer, shape: AdapterShape) -> Arc<dyn Model> {
    match api {
        Api::OpenAi => Arc::new(
            OpenAiCompat::builder()
                .base_url(server.v1())
                .model("gemma")
                .streaming(shape.streaming)
                .first_byte_timeout(shape.first_byte)
                .context_window(shape.context_window)
                .build()
                .expect("openai adapter"),
        ),
        Api::Anthropic => Arc::new(
            Anthropic::builder()
                .base_url(server.root())
                .api_key("unused")
                .model("gemma")
                .streaming(shape.streaming)
                .first_byte_timeout(shape.first_byte)
                .context_window(shape.context_window)
                .build()
                .expect("anthropic adapter"),
        ),
    }
}

/// A scripted decision for some turns: `Some(response)` answers the turn without the
/// server; `None` sends it to the server.
pub(crate) type Decide = dyn Fn(&ModelRequest) -> Option<ModelResponse> + Send + Sync;

/// A model that routes each turn to a script or to the server, and keeps every request the
/// server was sent (to show what a model was told).
pub(crate) struct Routed {
    real: Arc<dyn Model>,
    decide: Box<Decide>,
    examples: Vec<Message>,
    sent: Mutex<Vec<ModelRequest>>,
}

impl Routed {
    pub(crate) fn new(
        real: Arc<dyn Model>,
        decide: impl Fn(&ModelRequest) -> Option<ModelResponse> + Send + Sync + 'static,
    ) -> Arc<Routed> {
        Routed::with_examples(real, decide, Vec::new())
    }

    /// The same, with `examples` put before each conversation the server is sent: a few
    /// turns that show a base model the pattern to follow.
    pub(crate) fn with_examples(
        real: Arc<dyn Model>,
        decide: impl Fn(&ModelRequest) -> Option<ModelResponse> + Send + Sync + 'static,
        examples: Vec<Message>,
    ) -> Arc<Routed> {
        Arc::new(Routed {
            real,
            decide: Box::new(decide),
            examples,
            sent: Mutex::new(Vec::new()),
        })
    }

    /// Every request that went to the server, in order.
    pub(crate) fn sent(&self) -> Vec<ModelRequest> {
        self.sent.lock().clone()
    }
}

impl Model for Routed {
    fn turn(
        &self,
        request: ModelRequest,
    ) -> agent_tree_actors::BoxFuture<'_, Result<ModelResponse, ModelError>> {
        if let Some(response) = (self.decide)(&request) {
            return Box::pin(async move { Ok(response) });
        }
        let request = if self.examples.is_empty() {
            request
        } else {
            let mut messages = self.examples.clone();
            messages.extend(request.messages.iter().cloned());
            request.with_messages(messages)
        };
        self.sent.lock().push(request.clone());
        self.real.turn(request)
    }

    fn context_window(&self, request: &ModelRequest) -> Option<u32> {
        self.real.context_window(request)
    }
}

/// Usage as the server counts it.
pub(crate) fn counted(usage: Usage) -> ServerTokens {
    ServerTokens {
        prompt: usage.input_tokens,
        cached: usage.cache_read_tokens,
        predicted: usage.output_tokens,
    }
}

/// Whether the tree's usage equals the server's counters (read until they agree or 5 s
/// pass: the server counts a request as it releases its slot, just after answering).
/// Returns both figures.
pub(crate) async fn usage_matches(
    tree: &Tree,
    server: &LlamaServer,
) -> (bool, ServerTokens, ServerTokens) {
    usage_matches_beside(tree, server, ServerTokens::default()).await
}

/// As [`usage_matches`], the server's counters plus `gone`: what a server that was killed
/// since had reported (its counters died with it).
pub(crate) async fn usage_matches_beside(
    tree: &Tree,
    server: &LlamaServer,
    gone: ServerTokens,
) -> (bool, ServerTokens, ServerTokens) {
    tree.idle().await;
    let snapshot = tree.snapshot();
    snapshot.check_usage().expect("subtree totals add up");
    let ours = counted(snapshot.total_own());
    let mut theirs = server.tokens().await + gone;
    for _ in 0..50 {
        if theirs == ours {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        theirs = server.tokens().await + gone;
    }
    (theirs == ours, ours, theirs)
}

/// Asserts [`usage_matches`], printing both figures.
pub(crate) async fn assert_usage_matches(tree: &Tree, server: &LlamaServer) {
    let (matches, ours, theirs) = usage_matches(tree, server).await;
    eprintln!("usage: tree {ours:?}, server {theirs:?}");
    assert!(
        matches,
        "the tree billed {ours:?}, the server counted {theirs:?}"
    );
    assert!(ours.predicted > 0, "the server generated nothing");
}

/// The catalog of the three-level tree: a lead that may delegate to a researcher, which may
/// delegate to a checker.
pub(crate) fn three_levels() -> Catalog {
    Catalog::new([
        AgentDefinition::new(
            "lead",
            "You lead a small team. Answer in one short sentence.",
        )
        .with_description("Leads the team")
        .with_allowed_subagents(SubagentAllowance::only(["researcher"])),
        AgentDefinition::new(
            "researcher",
            "You research facts. Answer in one short sentence.",
        )
        .with_description("Researches facts")
        .with_allowed_subagents(SubagentAllowance::only(["checker"])),
        AgentDefinition::new("checker", "You check facts. Answer in one short sentence.")
            .with_description("Checks one fact"),
    ])
    .expect("catalog")
}

/// The delegation decisions of the three-level tree (the server's tiny models rarely call
/// a tool on their own): the lead's and the researcher's first turns delegate; every other
/// turn (each agent's answer, the checker's work) is the server's.
pub(crate) fn delegate(request: &ModelRequest) -> Option<ModelResponse> {
    let (to, task) = match request.agent_type() {
        "lead" => (
            "researcher",
            "Find out which city is the capital of France.",
        ),
        "researcher" => (
            "checker",
            "Is Paris the capital of France? Answer yes or no.",
        ),
        _ => return None,
    };
    (request.turn == 1).then(|| {
        ModelResponse::calls(vec![ToolCall::new(
            format!("call-{}", request.agent),
            "Agent",
            json!({ "agent_type": to, "prompt": task, "description": "delegate" }),
        )])
    })
}
