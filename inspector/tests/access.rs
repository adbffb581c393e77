//! Who may use the inspector: requests without its token, with a wrong one, or from
//! another origin are refused; a read-only inspector has no control route at all.

mod support;

use std::sync::Arc;

use agent_tree_actors::Tree;
use agent_tree_actors::testkit::ScriptedModel;
use agent_tree_inspector::{Inspector, InspectorConfig};
use support::{bearer, request};

async fn inspector(config: InspectorConfig) -> (Arc<Tree>, Inspector) {
    let tree = Arc::new(
        Tree::builder()
            .model(ScriptedModel::new())
            .build()
            .await
            .unwrap(),
    );
    let inspector = Inspector::serve(tree.clone(), config).await.unwrap();
    (tree, inspector)
}

/// The page and the API need the token: none, or a wrong one, is 401; the right one, as
/// the page's `?token=` or a bearer header, is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_the_token_are_refused() {
    let (_tree, inspector) = inspector(InspectorConfig::default().token("s3cret")).await;
    let addr = inspector.addr();
    assert_eq!(request(addr, "GET", "/", &[], None).await.status, 401);
    assert_eq!(
        request(addr, "GET", "/?token=wrong", &[], None)
            .await
            .status,
        401
    );
    let page = request(addr, "GET", "/?token=s3cret", &[], None).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("agent-tree inspector"));
    assert_eq!(
        request(addr, "GET", "/api/snapshot", &[], None)
            .await
            .status,
        401
    );
    let (name, wrong) = bearer("s3creT");
    assert_eq!(
        request(addr, "GET", "/api/snapshot", &[(name, &wrong)], None)
            .await
            .status,
        401
    );
    let (name, right) = bearer("s3cret");
    let snapshot = request(addr, "GET", "/api/snapshot", &[(name, &right)], None).await;
    assert_eq!(snapshot.status, 200, "{}", snapshot.body);
    assert!(snapshot.body.contains("\"rows\""));
    // A query token opens the page only, never the API.
    assert_eq!(
        request(addr, "GET", "/api/snapshot?token=s3cret", &[], None)
            .await
            .status,
        401
    );
    let (name, wrong) = bearer("nope");
    let control = request(addr, "POST", "/api/shutdown", &[(name, &wrong)], None).await;
    assert_eq!(control.status, 401);
}

/// Another site's page (its `Origin`) and a name that is not the inspector's (its `Host`,
/// as DNS rebinding would send) are refused, token or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_from_another_origin_are_refused() {
    let (_tree, inspector) = inspector(InspectorConfig::default()).await;
    let addr = inspector.addr();
    let (name, token) = bearer(inspector.token());
    let foreign = request(
        addr,
        "POST",
        "/api/shutdown",
        &[(name, &token), ("Origin", "http://evil.example")],
        None,
    )
    .await;
    assert_eq!(foreign.status, 403);
    let rebound = request(
        addr,
        "GET",
        "/api/snapshot",
        &[(name, &token), ("Host", "evil.example")],
        None,
    )
    .await;
    assert_eq!(rebound.status, 403);
    let own = format!("http://{addr}");
    let same = request(
        addr,
        "GET",
        "/api/snapshot",
        &[(name, &token), ("Origin", &own)],
        None,
    )
    .await;
    assert_eq!(same.status, 200);
}

/// A read-only inspector serves the tree but no control: every control route is absent
/// (404), with the token, and the snapshot says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_inspector_has_no_control_route() {
    let (tree, inspector) = inspector(InspectorConfig::default().read_only()).await;
    let addr = inspector.addr();
    let (name, token) = bearer(inspector.token());
    for path in [
        "/api/agents/a1/steer",
        "/api/agents/a1/abort",
        "/api/agents/a1/kill",
        "/api/agents/a1/resume",
        "/api/shutdown",
    ] {
        let refused = request(
            addr,
            "POST",
            path,
            &[(name, &token)],
            Some("{\"text\": \"x\"}"),
        )
        .await;
        assert_eq!(refused.status, 404, "{path}");
    }
    let snapshot = request(addr, "GET", "/api/snapshot", &[(name, &token)], None).await;
    assert!(snapshot.body.contains("\"read_only\":true"));
    tree.shutdown().await;
}

/// A token that cannot travel in a header is refused when the inspector starts.
#[tokio::test]
async fn a_token_that_cannot_travel_is_refused() {
    let tree = Arc::new(
        Tree::builder()
            .model(ScriptedModel::new())
            .build()
            .await
            .unwrap(),
    );
    let refused = Inspector::serve(tree, InspectorConfig::default().token("two words")).await;
    assert!(refused.is_err());
}

/// The token is a secret: printing the inspector or its configuration (`{:?}`, as a log
/// line or a panic message would) never shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_output_never_shows_the_token() {
    let secret = "do-not-print-me-0123456789";
    let config = InspectorConfig::default().token(secret);
    assert!(!format!("{config:?}").contains(secret), "{config:?}");
    let (_tree, inspector) = inspector(config).await;
    let printed = format!("{inspector:?}");
    assert!(!printed.contains(secret), "{printed}");
}

/// Refusals never echo the token, right or wrong, nor any header of the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_never_echo_a_token() {
    let (_tree, inspector) = inspector(InspectorConfig::default().token("s3cret")).await;
    let addr = inspector.addr();
    let (name, wrong) = bearer("guessed-token");
    for (path, headers) in [
        ("/api/snapshot", vec![(name, wrong.as_str())]),
        ("/?token=guessed-token", vec![]),
        (
            "/api/snapshot",
            vec![(name, "Bearer s3cret"), ("Origin", "http://evil.example")],
        ),
    ] {
        let refused = request(addr, "GET", path, &headers, None).await;
        assert!(refused.status == 401 || refused.status == 403, "{path}");
        assert!(!refused.body.contains("guessed"), "{}", refused.body);
        assert!(!refused.body.contains("s3cret"), "{}", refused.body);
    }
}

/// Every route needs the token, the stream of changes and a 404 included: without it the
/// answer is 401, never the route's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_needs_the_token() {
    let (_tree, inspector) = inspector(InspectorConfig::default()).await;
    let addr = inspector.addr();
    for (method, path) in [
        ("GET", "/api/events"),
        ("GET", "/api/agents/a0"),
        ("GET", "/api/agents/nonsense"),
        ("POST", "/api/agents/a1/steer"),
        ("POST", "/api/agents/a1/resume"),
        ("POST", "/api/agents/a1/kill"),
        ("GET", "/no/such/route"),
    ] {
        let refused = request(addr, method, path, &[], Some("{\"text\": \"x\"}")).await;
        assert_eq!(refused.status, 401, "{method} {path}");
    }
}

/// Malformed input is refused with a client error, never a crash or a control: an id
/// that is no number, an id past `u64`, a body that is not JSON, a steer without text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_client_errors() {
    let (tree, inspector) = inspector(InspectorConfig::default()).await;
    let addr = inspector.addr();
    let (name, token) = bearer(inspector.token());
    for (method, path, body) in [
        ("GET", "/api/agents/abc", None),
        ("GET", "/api/agents/a99999999999999999999999", None),
        ("POST", "/api/agents/a-1/abort", None),
        ("POST", "/api/agents/a1/steer", Some("not json")),
        ("POST", "/api/agents/a1/steer", Some("{\"words\": 1}")),
        ("POST", "/api/agents/a1/resume", Some("[")),
    ] {
        let refused = request(addr, method, path, &[(name, &token)], body).await;
        assert!(
            (400..500).contains(&refused.status),
            "{method} {path}: {} {}",
            refused.status,
            refused.body
        );
    }
    let unknown = request(addr, "GET", "/api/agents/a42", &[(name, &token)], None).await;
    assert_eq!(unknown.status, 404);
    // A steer far larger than any a page sends is refused before it reaches the tree (the
    // server may answer before it read the body, so the body's write may fail).
    let huge = format!("{{\"text\": \"{}\"}}", "x".repeat(8 << 20));
    let refused = huge_request(addr, &token, "/api/agents/a1/steer", &huge).await;
    assert!(refused.starts_with("HTTP/1.1 413"), "{refused}");
    assert_eq!(tree.live(), 0);
}

/// Stopping the inspector is bounded: a client that opened a connection and never
/// finished its request does not hold `stop` up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_does_not_hold_up_stop() {
    use tokio::io::AsyncWriteExt;
    let (_tree, inspector) = inspector(InspectorConfig::default()).await;
    let addr = inspector.addr();
    let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(format!("GET /api/snapshot HTTP/1.1\r\nHost: {addr}\r\n").as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(5), inspector.stop()).await;
    assert!(stopped.is_ok(), "stop waited on a stalled client");
    drop(stalled);
}

/// The token does not open the API to another page: an `Origin` of `null` (a sandboxed or
/// file page), a look-alike name, or another scheme is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_a_foreign_page_is_still_refused() {
    let (_tree, inspector) = inspector(InspectorConfig::default()).await;
    let addr = inspector.addr();
    let (name, token) = bearer(inspector.token());
    for origin in ["null", "http://localhost.evil.example", "https://127.0.0.1"] {
        let refused = request(
            addr,
            "POST",
            "/api/shutdown",
            &[(name, &token), ("Origin", origin)],
            None,
        )
        .await;
        assert_eq!(refused.status, 403, "{origin}");
    }
}

/// Posts `body` to `path` with `bearer`, ignoring a write the server cut short; the
/// response's status line.
async fn huge_request(addr: std::net::SocketAddr, bearer: &str, path: &str, body: &str) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {bearer}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let _ = stream.write_all(body.as_bytes()).await;
    let mut line = String::new();
    let _ = tokio::io::BufReader::new(stream).read_line(&mut line).await;
    line
}
