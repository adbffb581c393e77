//! A small support-ticket tree driven by a real model provider, or by a local mock of one.
//!
//! ```text
//! coordinator (d1)        delegates with the `Agent` tool
//! ├── researcher (d2)     reads the ticket with the `read_ticket` tool
//! └── writer (d2)         drafts the reply
//! ```
//!
//! The agents are loaded from agent files (Claude Code markdown with frontmatter), by
//! default `models/examples/agents/`. Run it offline against a local OpenAI-compatible mock
//! server that answers with scripted turns (delegation included):
//!
//! ```text
//! cargo run -p agent-tree-models --example live -- --mock [--stream]
//! ```
//!
//! or against a real provider chosen by environment variables:
//!
//! ```text
//! AGENT_TREE_PROVIDER=openai|anthropic   (default openai)
//! AGENT_TREE_BASE_URL=...                (default the provider's own API; e.g.
//!                                          http://127.0.0.1:11434/v1 for a local Ollama)
//! AGENT_TREE_API_KEY=...                 (optional for local servers)
//! AGENT_TREE_MODEL=...                   (required)
//! cargo run -p agent-tree-models --example live -- [--agents DIR] [--stream] [TASK...]
//! ```
//!
//! `--max-tokens N` and `--temperature T` set every agent's sampling (the tree's), and
//! `--context-window N` tells the model adapter how many tokens the model takes (say, the
//! `-c` a llama.cpp server was started with). `--help` prints the usage.
//!
//! It prints the tree, each agent's usage, and, once the usage totals add up
//! (`subtree == own + Σ children.subtree` everywhere), `usage check: ok`.

mod mock;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use agent_tree_actors::{Catalog, FnTool, Model, ToolError, Tree, TreeConfig};
use agent_tree_models::{Anthropic, OpenAiCompat};
use agent_tree_protocol::{AgentStatus, SpawnRequest, TreeSnapshot};
use serde_json::json;

const DEFAULT_TASK: &str = "New ticket #4127 came in. Handle it.";

const USAGE: &str = "\
usage: live [OPTIONS] [TASK...]

Runs a support-ticket tree (a coordinator delegating to a researcher and a writer) on a
model provider named by the environment, or on a local mock with --mock.

options:
  --mock                 run against a local scripted OpenAI-compatible server
  --stream               stream the model's answers
  --agents DIR           load the agent files of DIR (default models/examples/agents)
  --max-tokens N         the most tokens one model turn may produce, for every agent
  --temperature T        the sampling temperature, 0 to 2 (Anthropic: at most 1)
  --context-window N     the model's context window in tokens, when known
  -h, --help             print this and exit

environment (without --mock):
  AGENT_TREE_PROVIDER    openai (default) or anthropic
  AGENT_TREE_BASE_URL    the provider's base URL (default its own API), e.g.
                         http://127.0.0.1:8080/v1 for a llama.cpp server
  AGENT_TREE_API_KEY     the API key (optional for local servers)
  AGENT_TREE_MODEL       the model (required)

TASK defaults to: ";

struct Options {
    mock: bool,
    stream: bool,
    agents: PathBuf,
    task: String,
    max_tokens: Option<u32>,
    temperature: Option<f64>,
    context_window: Option<u32>,
}

/// What the command line asks for: a run, or the usage.
enum Command {
    Run(Options),
    Help,
}

fn options() -> Result<Command, String> {
    let mut options = Options {
        mock: false,
        stream: false,
        agents: Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/agents"),
        task: String::new(),
        max_tokens: None,
        temperature: None,
        context_window: None,
    };
    let mut words = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |what: &str| args.next().ok_or(format!("{arg} needs {what}"));
        match arg.as_str() {
            "--mock" => options.mock = true,
            "--stream" => options.stream = true,
            "--agents" => options.agents = value("a directory")?.into(),
            "--max-tokens" => options.max_tokens = Some(number(&arg, &value("a number")?)?),
            "--temperature" => options.temperature = Some(number(&arg, &value("a number")?)?),
            "--context-window" => {
                options.context_window = Some(number(&arg, &value("a number")?)?);
            }
            "-h" | "--help" => return Ok(Command::Help),
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            word => words.push(word.to_owned()),
        }
    }
    options.task = if words.is_empty() {
        DEFAULT_TASK.to_owned()
    } else {
        words.join(" ")
    };
    Ok(Command::Run(options))
}

/// The number `text` given to `flag`.
fn number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{flag}: {text:?} is not a valid number"))
}

/// The tree's config: every agent samples with the options' output limit and temperature
/// (the tree's defaults otherwise).
fn config(options: &Options) -> TreeConfig {
    let config = TreeConfig::default();
    let mut sampling = config.sampling.clone();
    if let Some(max) = options.max_tokens {
        sampling = sampling.with_max_output_tokens(max);
    }
    if let Some(temperature) = options.temperature {
        sampling = sampling.with_temperature(temperature);
    }
    config.with_sampling(sampling)
}

/// The catalog of the agent files in `dir`. Every valid file loads; each bad one is
/// reported (file and field) and skipped, and files without frontmatter (READMEs) are
/// skipped. A directory with no usable agent at all is an error.
fn load_catalog(dir: &Path) -> Result<Catalog, String> {
    let loaded = Catalog::load_dir(dir);
    for problem in &loaded.problems {
        eprintln!("skipped: {problem}");
    }
    if loaded.catalog.is_empty() {
        return Err(format!("no agent files load from {}", dir.display()));
    }
    Ok(loaded.catalog)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The model the environment names, and a line saying which it is (never the key).
fn provider(options: &Options) -> Result<(Arc<dyn Model>, String), String> {
    let stream = options.stream;
    let provider = env("AGENT_TREE_PROVIDER").unwrap_or_else(|| "openai".into());
    let model = env("AGENT_TREE_MODEL")
        .ok_or("set AGENT_TREE_MODEL (and AGENT_TREE_PROVIDER, AGENT_TREE_BASE_URL, AGENT_TREE_API_KEY), or run with --mock")?;
    let base = env("AGENT_TREE_BASE_URL");
    let key = env("AGENT_TREE_API_KEY");
    let built: (Arc<dyn Model>, String) = match provider.as_str() {
        "openai" => {
            let mut builder = OpenAiCompat::builder().model(&model).streaming(stream);
            if let Some(window) = options.context_window {
                builder = builder.context_window(window);
            }
            if let Some(base) = base {
                builder = builder.base_url(base);
            }
            if let Some(key) = key {
                builder = builder.api_key(key);
            }
            let adapter = builder.build().map_err(|e| e.to_string())?;
            let line = format!("openai-compatible {} model {model}", adapter.url());
            (Arc::new(adapter), line)
        }
        "anthropic" => {
            let mut builder = Anthropic::builder().model(&model).streaming(stream);
            if let Some(window) = options.context_window {
                builder = builder.context_window(window);
            }
            if let Some(base) = base {
                builder = builder.base_url(base);
            }
            if let Some(key) = key {
                builder = builder.api_key(key);
            }
            let adapter = builder.build().map_err(|e| e.to_string())?;
            let line = format!("anthropic {} model {model}", adapter.url());
            (Arc::new(adapter), line)
        }
        other => {
            return Err(format!(
                "AGENT_TREE_PROVIDER={other}: expected openai or anthropic"
            ));
        }
    };
    Ok(built)
}

/// The researcher's tool: the text of a ticket by number.
fn read_ticket() -> impl agent_tree_actors::Tool {
    FnTool::new(
        "read_ticket",
        "Reads a support ticket by its number.",
        |_context, input| async move {
            let id = input["ticket"]
                .as_u64()
                .or_else(|| input["ticket"].as_str()?.trim_start_matches('#').parse().ok());
            match id.and_then(mock::ticket) {
                Some(text) => Ok(text.to_owned()),
                None => Err(ToolError::new(format!(
                    "no such ticket: {}; the open ticket is 4127",
                    input["ticket"]
                ))),
            }
        },
    )
    .with_schema(json!({
        "type": "object",
        "properties": { "ticket": { "type": "integer", "description": "The ticket number, e.g. 4127" } },
        "required": ["ticket"]
    }))
}

fn print_usage(snapshot: &TreeSnapshot) {
    println!("\nusage per agent (own / subtree):");
    for record in snapshot.depth_first() {
        if record.id.is_root() {
            continue;
        }
        let indent = "  ".repeat(record.depth as usize);
        println!(
            "{indent}{} {}: own {} / subtree {}",
            record.agent_type, record.id, record.own, record.subtree
        );
    }
}

async fn run(options: Options) -> Result<Vec<String>, String> {
    let catalog = load_catalog(&options.agents)?;
    let (model, description) = if options.mock {
        let base = mock::start().await.map_err(|e| e.to_string())?;
        let mut builder = OpenAiCompat::builder()
            .base_url(base)
            .model("mock-chat")
            .streaming(options.stream);
        if let Some(window) = options.context_window {
            builder = builder.context_window(window);
        }
        let adapter = builder.build().map_err(|e| e.to_string())?;
        let line = format!("mock openai-compatible server {}", adapter.url());
        (Arc::new(adapter) as Arc<dyn Model>, line)
    } else {
        provider(&options)?
    };
    println!(
        "model: {description}{}",
        if options.stream { " (streaming)" } else { "" }
    );
    if let Some(max) = options.max_tokens {
        println!("max tokens per turn: {max}");
    }
    if let Some(temperature) = options.temperature {
        println!("temperature: {temperature}");
    }
    println!("agents: {}", options.agents.display());
    println!("task: {}\n", options.task);

    let tree = Tree::builder()
        .config(config(&options))
        .catalog(catalog)
        .shared_model(model)
        .tool(read_ticket())
        .map_err(|e| e.to_string())?
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let outcome = tree
        .run(SpawnRequest::new("coordinator", options.task))
        .await
        .map_err(|e| e.to_string())?;
    tree.idle().await;
    let snapshot = tree.snapshot();
    print!("{}", snapshot.render_text());
    print_usage(&snapshot);
    println!("\ncoordinator's answer:\n{}\n", outcome.summary());

    let mut failures = Vec::new();
    if !outcome.is_completed() {
        failures.push(format!(
            "the coordinator did not complete: {}",
            outcome.summary()
        ));
    }
    let delegated = snapshot.agents().filter(|r| r.depth == 2).count();
    if options.mock {
        let completed = snapshot
            .agents()
            .filter(|r| r.status == AgentStatus::Completed)
            .count();
        if delegated != 2 || completed != 3 {
            failures.push(format!(
                "expected a coordinator with two completed children, got {}",
                snapshot.depth_histogram_line()
            ));
        }
    } else if delegated == 0 && outcome.is_completed() {
        println!("note: the model answered without delegating");
    }
    match snapshot.check_usage() {
        Ok(()) if failures.is_empty() => println!("usage check: ok"),
        Ok(()) => {}
        Err(mismatch) => failures.push(mismatch.to_string()),
    }
    tree.shutdown().await;
    Ok(failures)
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match options() {
        Ok(Command::Run(options)) => options,
        Ok(Command::Help) => {
            println!("{USAGE}{DEFAULT_TASK}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}{DEFAULT_TASK}");
            return ExitCode::FAILURE;
        }
    };
    match run(options).await {
        Ok(failures) if failures.is_empty() => ExitCode::SUCCESS,
        Ok(failures) => {
            for failure in failures {
                eprintln!("check failed: {failure}");
            }
            ExitCode::FAILURE
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
