//! Agent spans with `tracing-subscriber`: every line logged inside a model call or a tool
//! names its agent (OpenTelemetry GenAI field names, so a `tracing-opentelemetry` layer
//! exports standard traces), nested under its owner's span.
//!
//! `cargo run --example traced_tree` prints lines such as
//! `INFO agent_tree{session=..}:invoke_agent{gen_ai.agent.id=a1 ..}:invoke_agent{gen_ai.agent.id=a2 ..}:chat{..}: calling the model`.

use agent_tree::prelude::*;
use agent_tree::testkit::{Call, Script, ScriptedModel, Turn};
use agent_tree::{BoxFuture, FnTool, ModelError, ModelRequest, ModelResponse};

/// The scripted model, logging from inside each call as an HTTP client would.
struct Logged(ScriptedModel);

impl Model for Logged {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        tracing::info!(turn = request.turn, "calling the model");
        self.0.turn(request)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_ansi(false)
        .without_time()
        .with_max_level(tracing::Level::INFO)
        .init();
    let model = ScriptedModel::new()
        .script(
            "lead",
            Script::new([
                Turn::spawn("scout", "find the config"),
                Turn::answer("done"),
            ]),
        )
        .script(
            "scout",
            Script::new([
                Turn::calls([Call::tool("read", serde_json::json!({"path": "app.toml"}))]),
                Turn::answer("found it"),
            ]),
        );
    let catalog = Catalog::new([
        AgentDefinition::new("lead", "You lead.")
            .with_allowed_subagents(SubagentAllowance::only(["scout"])),
        AgentDefinition::new("scout", "You look things up."),
    ])?;
    let tree = Tree::builder()
        .catalog(catalog)
        .model(Logged(model))
        .tool(FnTool::new(
            "read",
            "Reads a file.",
            |_, input| async move {
                tracing::info!(%input, "reading");
                Ok("[server]\nport = 8080".to_owned())
            },
        ))?
        .build()
        .await?;
    let outcome = tree
        .run(SpawnRequest::new("lead", "where is the config?"))
        .await?;
    println!("outcome: {}", outcome.summary());
    tree.shutdown().await;
    Ok(())
}
