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
