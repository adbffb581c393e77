//! The inspector in a real browser: headless Chromium driven over WebDriver by
//! `chromedriver` (Debian's `chromium` and `chromium-driver`, which `.ci/run` installs). The
//! page loads, the tree appears and updates as agents spawn and settle, a steer typed into
//! the page reaches the agent, the abort button aborts the subtree, a wrong token is
//! refused, and rewind shows the tree at a chosen event.
//!
//! `cargo test -p agent-tree-inspector --features browser --test browser`; with
//! `AGENT_TREE_SCREENSHOTS=<dir>` it saves the page's screenshots there.

mod support;

use std::sync::Arc;
use std::time::Duration;

use agent_tree_actors::testkit::{Call, ScriptedModel, Turn};
use agent_tree_actors::{Catalog, FnTool, JournalConfig, Tree};
use agent_tree_inspector::{Inspector, InspectorConfig, Timeline};
use agent_tree_protocol::{AgentDefinition, AgentStatus, SpawnRequest, SubagentAllowance};
use serde_json::{Value, json};
use support::request;
use tokio::io::AsyncBufReadExt;

/// How to get the browser, for every failure that lacks it.
const INSTALL: &str = "the browser test needs Debian's chromium and chromium-driver: \
    `apt-get install -y chromium chromium-driver` (.ci/run installs them), then \
    `cargo test -p agent-tree-inspector --features browser --test browser`";

/// A headless Chromium under chromedriver, one WebDriver session.
struct Browser {
    driver: std::net::SocketAddr,
    session: String,
    _chromedriver: tokio::process::Child,
}

impl Browser {
    async fn start() -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut chromedriver = tokio::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("chromedriver cannot run ({e}): {INSTALL}"));
        let mut lines = tokio::io::BufReader::new(chromedriver.stdout.take().unwrap()).lines();
        let started = async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains("started successfully") {
                    return;
                }
            }
            panic!("chromedriver ended before it started: {INSTALL}");
        };
        tokio::time::timeout(Duration::from_secs(20), started)
            .await
            .expect("chromedriver starts");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let driver = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let binary = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or_else(|| panic!("no chromium binary: {INSTALL}"));
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": binary, "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,900"
            ]}
        }}});
        let created = call(driver, "POST", "/session", Some(capabilities)).await;
        let session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        Browser {
            driver,
            session,
            _chromedriver: chromedriver,
        }
    }

    async fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        call(
            self.driver,
            method,
            &format!("/session/{}{path}", self.session),
            body,
        )
        .await
    }

    async fn open(&self, url: &str) {
        self.command("POST", "/url", Some(json!({"url": url})))
            .await;
    }

    /// Runs `script` (a function body) in the page; its return value.
    async fn run(&self, script: &str) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Waits (within a bound) until `script` returns true in the page: the browser tells
    /// nothing of a page's changes, so it is asked.
    async fn until(&self, what: &str, script: &str) {
        let holds = async {
            while self.run(script).await != Value::Bool(true) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), holds)
            .await
            .unwrap_or_else(|_| panic!("the page never showed {what}"));
    }

    /// The WebDriver id of the element `css` names.
    async fn find(&self, css: &str) -> String {
        let using = json!({"using": "css selector", "value": css});
        let found = self.command("POST", "/element", Some(using)).await;
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned()
    }

    /// Clicks the element `css` names; found again if the page redrew it in between (the
    /// tree's rows are redrawn with every batch).
    async fn click(&self, css: &str) {
        for _ in 0..10 {
            let id = self.find(css).await;
            let path = format!("/session/{}/element/{id}/click", self.session);
            let body = json!({}).to_string();
            let clicked = request(self.driver, "POST", &path, &[], Some(&body)).await;
            if clicked.status == 200 {
                return;
            }
            assert!(
                clicked.body.contains("stale element"),
                "click {css}: {} {}",
                clicked.status,
                clicked.body
            );
        }
        panic!("{css} was redrawn under every click");
    }

    async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.command(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// Saves a screenshot as `<AGENT_TREE_SCREENSHOTS>/<name>.png`, when that is set.
    async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("AGENT_TREE_SCREENSHOTS") else {
            return;
        };
        let png = self.command("GET", "/screenshot", None).await;
        let bytes = decode_base64(png.as_str().unwrap());
        std::fs::write(
            std::path::Path::new(&dir).join(format!("{name}.png")),
            bytes,
        )
        .unwrap();
    }
}

/// Ends the session, so chromedriver closes Chromium (killing chromedriver alone would
/// leave the browser's processes behind): blocking, as a drop must be, and also when the
/// test failed.
impl Drop for Browser {
    fn drop(&mut self) {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(self.driver) else {
            return;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let head = format!(
            "DELETE /session/{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            self.session, self.driver
        );
        if stream.write_all(head.as_bytes()).is_ok() {
            // The answer comes once the browser is closed.
            let _ = stream.read(&mut [0u8; 1024]);
        }
    }
}

/// One WebDriver command: its `value`.
async fn call(
    driver: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Value {
    let body = body.map(|b| b.to_string());
    let response = request(driver, method, path, &[], body.as_deref()).await;
    let value: Value = serde_json::from_str(&response.body).unwrap_or(Value::Null);
    assert!(
        response.status == 200,
        "WebDriver {method} {path}: {} {}",
        response.status,
        response.body
    );
    value["value"].clone()
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = text
        .bytes()
        .filter(|&c| c != b'=' && !c.is_ascii_whitespace())
        .collect();
    clean
        .chunks(4)
        .flat_map(|chunk| {
            let n = chunk
                .iter()
                .fold(0u32, |n, &c| n << 6 | u32::from(value(c)))
                << (6 * (4 - chunk.len()));
            let bytes = n.to_be_bytes();
            bytes[1..chunk.len()].to_vec()
        })
        .collect()
}

/// The ticket handler's tree, slowed so the page sees it work: 11 agents, 4 levels.
fn ticket_tree(slow: Duration, more: &[AgentDefinition]) -> (Catalog, ScriptedModel) {
    let delegator = |name: &str, allowed: &[&str]| {
        AgentDefinition::new(name, "")
            .with_allowed_subagents(SubagentAllowance::only(allowed.iter().copied()))
    };
    let mut definitions = vec![
        delegator("orchestrator", &["handler"]),
        delegator("handler", &["planner", "implementer"]),
        delegator("planner", &["analyst"]),
        delegator("implementer", &["coder"]),
        AgentDefinition::new("analyst", ""),
        AgentDefinition::new("coder", ""),
    ];
    definitions.extend(more.iter().cloned());
    let catalog = Catalog::new(definitions).unwrap();
    let t = |turn: Turn| {
        turn.after(slow)
            .usage(agent_tree_protocol::Usage::tokens(120, 40))
    };
    let model = ScriptedModel::new()
        .script(
            "orchestrator",
            [
                t(Turn::spawn("handler", "ticket")),
                t(Turn::answer("resolved")),
            ],
        )
        .script(
            "handler",
            [
                t(Turn::calls([
                    Call::spawn("planner", "plan"),
                    Call::spawn("implementer", "do"),
                ])),
                t(Turn::answer("handled")),
            ],
        )
        .script(
            "planner",
            [
                t(Turn::calls(
                    (0..3).map(|i| Call::spawn("analyst", format!("read {i}"))),
                )),
                t(Turn::answer("planned")),
            ],
        )
        .script(
            "implementer",
            [
                t(Turn::calls(
                    (0..4).map(|i| Call::spawn("coder", format!("change {i}"))),
                )),
                t(Turn::answer("done")),
            ],
        )
        .script("analyst", [t(Turn::answer("finding"))])
        .script("coder", [t(Turn::answer("changed"))]);
    (catalog, model)
}

/// The live page: it loads, the tree appears and updates as agents spawn and settle (11
/// agents, 4 levels), a steer typed into it reaches the agent, its abort button aborts a
/// subtree, and a wrong token is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_and_controls_a_live_tree() {
    let browser = Browser::start().await;
    let more = [
        AgentDefinition::new("steered", ""),
        AgentDefinition::new("doomed", "").with_allowed_subagents(SubagentAllowance::All),
        AgentDefinition::new("sleeper", ""),
    ];
    let (catalog, model) = ticket_tree(Duration::from_millis(300), &more);
    let model = model
        .script(
            "steered",
            [
                Turn::calls([Call::tool("wait", json!({}))]),
                Turn::answer("heard"),
            ],
        )
        .script(
            "doomed",
            [Turn::spawn("sleeper", "forever"), Turn::answer("never")],
        )
        .script(
            "sleeper",
            [Turn::answer("x").after(Duration::from_secs(60))],
        );
    let waiting = Arc::new(tokio::sync::Notify::new());
    let release = waiting.clone();
    let wait = FnTool::new("wait", "waits", move |_, _| {
        let release = release.clone();
        async move {
            release.notified().await;
            Ok("waited".to_owned())
        }
    });
    let tree = Arc::new(
        Tree::builder()
            .catalog(catalog)
            .model(model.clone())
            .tool(wait)
            .unwrap()
            .build()
            .await
            .unwrap(),
    );
    let inspector = Inspector::serve(tree.clone(), InspectorConfig::default())
        .await
        .unwrap();

    browser
        .open(&format!("http://{}/?token=wrong", inspector.addr()))
        .await;
    let refused = browser.run("return document.body.innerText").await;
    assert!(
        refused.as_str().unwrap_or("").contains("needs its token"),
        "{refused}"
    );

    browser.open(&inspector.url()).await;
    browser
        .until(
            "the page ready",
            "return document.body.dataset.ready === 'yes'",
        )
        .await;
    assert_eq!(
        browser.run("return location.search").await,
        "",
        "the token left the address bar"
    );
    let mut ticket = tree
        .spawn(SpawnRequest::new("orchestrator", "ticket"))
        .await
        .unwrap();
    browser.until("11 agents", "return rows.size === 12").await;
    browser
        .run("for (const id of rows.keys()) open.add(id); render(); return true")
        .await;
    browser
        .until(
            "four levels",
            "return [...rows.values()].some(r => r.depth === 4)",
        )
        .await;
    browser.click(".row[data-id='a3']").await;
    browser.screenshot("inspector-live").await;
    assert_eq!(ticket.outcome().await.status, AgentStatus::Completed);
    browser
        .until(
            "every agent settled",
            "return [...rows.values()].filter(r => r.status === 'completed').length === 11",
        )
        .await;

    // A steer typed into the page reaches the agent at its next turn.
    let mut steered = tree
        .spawn(SpawnRequest::new("steered", "wait"))
        .await
        .unwrap();
    let id = steered.id().to_string();
    browser
        .until("the steered agent", &format!("return rows.has('{id}')"))
        .await;
    browser.click(&format!(".row[data-id='{id}']")).await;
    browser.type_into("#steer-text", "look at the logs").await;
    browser.click("#steer").await;
    browser
        .until(
            "the steer's receipt",
            "return ($('said') || {}).textContent?.startsWith('steer:') === true",
        )
        .await;
    waiting.notify_one();
    assert_eq!(steered.outcome().await.status, AgentStatus::Completed);
    assert!(
        model
            .log_of(steered.id())
            .last()
            .unwrap()
            .has_user_message("look at the logs")
    );

    // The abort button aborts the agent's whole subtree.
    let mut doomed = tree.spawn(SpawnRequest::new("doomed", "go")).await.unwrap();
    let id = doomed.id().to_string();
    browser
        .until(
            "the doomed agent's child",
            &format!("return [...rows.values()].some(r => r.parent === '{id}')"),
        )
        .await;
    browser.click(&format!(".row[data-id='{id}']")).await;
    browser.click("#abort").await;
    assert_eq!(doomed.outcome().await.status, AgentStatus::Aborted);
    browser.until("the subtree aborted", &format!("return [...rows.values()].filter(r => r.parent === '{id}' || r.id === '{id}').every(r => r.status === 'aborted')")).await;
    inspector.stop().await;
    tree.shutdown().await;
}

/// A rewound journal in the page: the scrubber shows the tree as it was at a chosen event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_rewinds_a_journal_to_a_chosen_event() {
    let dir = std::env::temp_dir().join(format!("agent-tree-browser-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("tree.journal");
    let (catalog, model) = ticket_tree(Duration::from_millis(5), &[]);
    let tree = Tree::builder()
        .catalog(catalog)
        .model(model)
        .journal(JournalConfig::new(&journal))
        .build()
        .await
        .unwrap();
    tree.run(SpawnRequest::new("orchestrator", "ticket"))
        .await
        .unwrap();
    tree.idle().await;
    tree.shutdown().await;
    let timeline = Timeline::read(&journal).unwrap();
    // The moment the handler's two children were spawned and nothing below them yet.
    let chosen = (0..=timeline.len())
        .find(|&n| timeline.at(n).unwrap().0.len() == 5)
        .unwrap();
    let expected = timeline.at(chosen).unwrap().0.len();
    let browser = Browser::start().await;
    let inspector = Inspector::rewind(timeline, InspectorConfig::default())
        .await
        .unwrap();
    browser.open(&inspector.url()).await;
    browser
        .until(
            "the page ready",
            "return document.body.dataset.ready === 'yes'",
        )
        .await;
    browser.run(&format!("const s = $('scrub'); s.value = '{chosen}'; s.dispatchEvent(new Event('input')); return true")).await;
    browser
        .until(
            "the chosen event",
            &format!("return document.body.dataset.at === '{chosen}'"),
        )
        .await;
    assert_eq!(browser.run("return rows.size").await, json!(expected));
    browser
        .run("for (const id of rows.keys()) open.add(id); render(); return true")
        .await;
    browser.click(".row[data-id='a2']").await;
    browser.screenshot("inspector-rewind").await;
}

/// A steer being typed survives the stream: batches about other agents, arriving while
/// the user types, leave the steer box focused and its text whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_a_steer_survives_the_stream() {
    let browser = Browser::start().await;
    let catalog = Catalog::new([
        AgentDefinition::new("sleeper", ""),
        AgentDefinition::new("busy", ""),
    ])
    .unwrap();
    let model = ScriptedModel::new()
        .script(
            "sleeper",
            [Turn::answer("x").after(Duration::from_secs(60))],
        )
        .script("busy", [Turn::answer("done")]);
    let tree = Arc::new(
        Tree::builder()
            .catalog(catalog)
            .model(model)
            .build()
            .await
            .unwrap(),
    );
    let inspector = Inspector::serve(tree.clone(), InspectorConfig::default())
        .await
        .unwrap();
    let sleeper = tree
        .spawn(SpawnRequest::new("sleeper", "sleep"))
        .await
        .unwrap();
    browser.open(&inspector.url()).await;
    browser
        .until(
            "the page ready",
            "return document.body.dataset.ready === 'yes'",
        )
        .await;
    let row = format!(".row[data-id='{}']", sleeper.id());
    browser
        .until(
            "the sleeper",
            &format!("return !!document.querySelector(\"{row}\")"),
        )
        .await;
    browser.click(&row).await;
    browser
        .until(
            "the steer box",
            "return !!document.getElementById('steer-text')",
        )
        .await;
    browser.type_into("#steer-text", "look at the").await;
    assert_eq!(
        browser
            .run("return document.activeElement && document.activeElement.id")
            .await,
        "steer-text",
        "typing focuses the steer box"
    );
    // Other agents come and go while the user types on.
    for _ in 0..5 {
        tree.run(SpawnRequest::new("busy", "b")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    browser
        .until("all six agents", "return rows.size === 7")
        .await;
    let focused = browser
        .run("return document.activeElement && document.activeElement.id")
        .await;
    assert_eq!(focused, "steer-text", "the steer box lost the focus");
    assert_eq!(
        browser
            .run("return document.getElementById('steer-text').value")
            .await,
        "look at the"
    );
    inspector.stop().await;
    tree.shutdown().await;
}
