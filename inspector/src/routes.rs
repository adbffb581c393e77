//! The inspector's routes: the page, the snapshot, the stream of changes, one agent's
//! record, and (unless read-only) the controls, each through the `Tree` method a program
//! would call. Every route checks the request first (`auth.rs`).

use std::sync::Arc;

use agent_tree_actors::{ControlError, Tree};
use agent_tree_protocol::AgentId;
use axum::Json;
use axum::extract::{Path, Query, Request, State as Extract};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response, Sse};
use axum::routing::{get, post};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::InspectorConfig;
use crate::auth::{Guard, Refusal};
use crate::changes::{Hub, Row, Whole};
use crate::timeline::Timeline;

/// The page: one document, its style and script inline.
const PAGE: &str = include_str!("page/index.html");

/// What an inspector shows: a live tree, or a journal rewound.
#[derive(Clone)]
pub(crate) enum Source {
    Live(Arc<Tree>),
    Rewind(Arc<crate::timeline::Timeline>),
}

/// What a live tree's routes share.
#[derive(Clone)]
pub(crate) struct State {
    pub(crate) tree: Arc<Tree>,
    pub(crate) config: InspectorConfig,
    /// The tree's changes, gathered once for every watcher.
    pub(crate) hub: Hub,
}

/// The router of `source`: for a live tree the read routes, and the control routes unless
/// read-only (then they do not exist at all: 404, not 403); for a rewind, the journal's
/// tree at any event. Every route is behind the guard.
pub(crate) fn router(
    source: Source,
    guard: Arc<Guard>,
    config: InspectorConfig,
    stop: CancellationToken,
) -> axum::Router {
    let routes = match source {
        Source::Live(tree) => {
            let hub = Hub::start(tree.clone(), config.batch, config.max_batch_events, stop);
            live(State { tree, config, hub })
        }
        Source::Rewind(timeline) => axum::Router::new()
            .route("/", get(page))
            .route("/api/snapshot", get(rewound_whole))
            .route("/api/rewind/{n}", get(rewound_at))
            .with_state(timeline),
    };
    routes.layer(middleware::from_fn(move |request: Request, next: Next| {
        let guard = guard.clone();
        async move { guarded(&guard, request, next).await }
    }))
}

fn live(state: State) -> axum::Router {
    let mut routes = axum::Router::new()
        .route("/", get(page))
        .route("/api/snapshot", get(snapshot))
        .route("/api/events", get(events))
        .route("/api/agents/{id}", get(agent));
    if !state.config.read_only {
        routes = routes
            .route("/api/agents/{id}/steer", post(steer))
            .route("/api/agents/{id}/abort", post(abort))
            .route("/api/agents/{id}/kill", post(kill))
            .route("/api/agents/{id}/resume", post(resume))
            .route("/api/shutdown", post(shutdown));
    }
    routes.with_state(state)
}

/// The page's `?token=`.
#[derive(Deserialize)]
struct PageQuery {
    token: Option<String>,
}

/// Refuses a request without the token or from another origin, before any route runs.
async fn guarded(guard: &Guard, request: Request, next: Next) -> Response {
    let query_token = (request.uri().path() == "/")
        .then(|| Query::<PageQuery>::try_from_uri(request.uri()).ok())
        .flatten()
        .and_then(|q| q.0.token);
    match guard.check(request.headers(), query_token.as_deref()) {
        Ok(()) => {
            let mut response = next.run(request).await;
            let headers = response.headers_mut();
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
            headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
            response
        }
        Err(Refusal::Token) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "the inspector needs its token: open the address it printed (`?token=...`)",
        )
            .into_response(),
        Err(Refusal::Origin) => (
            StatusCode::FORBIDDEN,
            "the inspector answers its own page only",
        )
            .into_response(),
    }
}

async fn page() -> Html<&'static str> {
    Html(PAGE)
}

async fn snapshot(Extract(state): Extract<State>) -> Json<Whole> {
    Json(Whole::of(&state.tree.snapshot(), state.config.read_only))
}

/// How many events before the rewound moment the page's log shows.
const REWIND_LOG: usize = 200;

async fn rewound_whole(Extract(timeline): Extract<Arc<Timeline>>) -> Response {
    rewound(&timeline, timeline.len())
}

async fn rewound_at(Extract(timeline): Extract<Arc<Timeline>>, Path(n): Path<usize>) -> Response {
    rewound(&timeline, n)
}

/// The journal's tree after its first `n` events, with the events just before.
fn rewound(timeline: &Timeline, n: usize) -> Response {
    let n = n.min(timeline.len());
    match timeline.at(n) {
        Ok((records, tally)) => {
            let whole = Whole::rewound(timeline.session(), &records, tally, timeline.len());
            let from = n.saturating_sub(REWIND_LOG);
            let events = timeline.events(from, n - from);
            Json(serde_json::json!({"at": n, "whole": whole, "events": events})).into_response()
        }
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error).into_response(),
    }
}

/// The stream's `?since=`: the `seq` of the snapshot the page holds.
#[derive(Deserialize)]
struct Since {
    since: Option<u64>,
}

async fn events(Extract(state): Extract<State>, Query(since): Query<Since>) -> impl IntoResponse {
    Sse::new(state.hub.watch(since.since)).keep_alive(axum::response::sse::KeepAlive::default())
}

/// An agent id from the path (`a7` or `7`).
fn agent_id(raw: &str) -> Option<AgentId> {
    raw.strip_prefix('a')
        .unwrap_or(raw)
        .parse::<u64>()
        .ok()
        .map(AgentId::new)
}

/// The answer to a path that names no agent.
fn no_id(raw: &str) -> Response {
    (StatusCode::BAD_REQUEST, format!("no agent id: {raw:?}")).into_response()
}

async fn agent(Extract(state): Extract<State>, Path(raw): Path<String>) -> Response {
    let Some(id) = agent_id(&raw) else {
        return no_id(&raw);
    };
    match state.tree.record(id) {
        Some(record) => {
            Json(serde_json::json!({"row": Row::of(&record), "record": record})).into_response()
        }
        None => (StatusCode::NOT_FOUND, format!("no agent {id}")).into_response(),
    }
}

/// A control's answer: what the tree said, as JSON, or its refusal.
fn answered<T: serde::Serialize>(result: Result<T, ControlError>) -> Response {
    match result {
        Ok(value) => Json(serde_json::json!({"ok": value})).into_response(),
        Err(error) => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({"error": error.to_string()})),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
struct Text {
    text: String,
}

async fn steer(
    Extract(state): Extract<State>,
    Path(raw): Path<String>,
    Json(body): Json<Text>,
) -> Response {
    match agent_id(&raw) {
        Some(id) => answered(state.tree.steer(id, body.text).await),
        None => no_id(&raw),
    }
}

async fn abort(Extract(state): Extract<State>, Path(raw): Path<String>) -> Response {
    match agent_id(&raw) {
        Some(id) => answered(state.tree.abort(id).map(|()| "aborted")),
        None => no_id(&raw),
    }
}

async fn kill(Extract(state): Extract<State>, Path(raw): Path<String>) -> Response {
    match agent_id(&raw) {
        Some(id) => answered(state.tree.kill(id).map(|()| "killed")),
        None => no_id(&raw),
    }
}

async fn resume(
    Extract(state): Extract<State>,
    Path(raw): Path<String>,
    Json(body): Json<Text>,
) -> Response {
    let Some(id) = agent_id(&raw) else {
        return no_id(&raw);
    };
    match state.tree.resume(id, body.text).await {
        Ok(handle) => Json(serde_json::json!({"ok": handle.id()})).into_response(),
        Err(error) => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({"error": error.to_string()})),
        )
            .into_response(),
    }
}

async fn shutdown(Extract(state): Extract<State>) -> Response {
    let report = state.tree.shutdown().await;
    Json(serde_json::json!({
        "graceful": report.graceful,
        "killed": report.killed,
        "hook_failures": report.hook_failures,
        "elapsed_ms": report.elapsed.as_millis() as u64,
        "unreachable_nodes": report.unreachable_nodes,
    }))
    .into_response()
}
