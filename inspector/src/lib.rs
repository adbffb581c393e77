//! A live inspector for agent-tree: a web page on 127.0.0.1 that shows a running tree as it
//! changes and, unless it is read-only, steers, aborts, kills and resumes its agents and
//! shuts it down, through the same [`Tree`] methods and rules a
//! program uses.
//!
//! ```no_run
//! use std::sync::Arc;
//! use agent_tree_actors::Tree;
//! use agent_tree_actors::testkit::ScriptedModel;
//! use agent_tree_inspector::{Inspector, InspectorConfig};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let tree = Arc::new(Tree::builder().model(ScriptedModel::new()).build().await?);
//! let inspector = Inspector::serve(tree.clone(), InspectorConfig::default()).await?;
//! println!("open {}", inspector.url());
//! // ... the tree runs; the page shows it ...
//! inspector.stop().await;
//! # Ok(()) }
//! ```
//!
//! * **Served** by axum on the tokio runtime the tree runs on; the page is one HTML
//!   document embedded in the crate (its script and style inline), no front-end build.
//! * **Live**: the page reads the snapshot once, then a stream of server-sent events, each
//!   a batch of the tree's events and the records they changed (never whole snapshots),
//!   gathered for [`InspectorConfig::batch`]. A watcher that reads slowly costs memory for
//!   one record per changed agent and a bounded event log, never the tree's time.
//! * **Guarded**: every request carries the bearer token (the application's, or one the
//!   inspector makes from 128 random bits): the page as `?token=`, the API as
//!   `Authorization: Bearer`. No cookies. A request whose `Host` is not the inspector's
//!   address, or whose `Origin` is another, is refused. A read-only inspector has no control
//!   route at all.

#![forbid(unsafe_code)]

mod auth;
mod changes;
mod routes;
mod timeline;

pub use timeline::{MARK_EVERY, RewindError, Timeline};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_tree_actors::Tree;
use tokio_util::sync::CancellationToken;

/// How an inspector is served.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InspectorConfig {
    /// Where it listens: 127.0.0.1 on a free port by default. Requests must name this
    /// address (or `localhost` on its port, for a loopback one) as their `Host`, so bind a
    /// specific address: on 0.0.0.0 only requests naming `0.0.0.0:<port>` are served.
    pub addr: SocketAddr,
    /// The bearer token every request must carry; one is made when `None`.
    pub token: Option<String>,
    /// Watch only: no control route is served.
    pub read_only: bool,
    /// How long changes are gathered into one message to a watcher.
    pub batch: Duration,
    /// The most events of one batch sent for the event log (the records they changed are
    /// always sent); the rest are counted as skipped.
    pub max_batch_events: usize,
}

impl Default for InspectorConfig {
    fn default() -> Self {
        InspectorConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            read_only: false,
            batch: Duration::from_millis(100),
            max_batch_events: 2_000,
        }
    }
}

/// Never shows the token.
impl std::fmt::Debug for InspectorConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InspectorConfig")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "(hidden)"))
            .field("read_only", &self.read_only)
            .field("batch", &self.batch)
            .field("max_batch_events", &self.max_batch_events)
            .finish()
    }
}

impl InspectorConfig {
    /// Gathers changes for `every` into one message to a watcher.
    #[must_use]
    pub fn batch(mut self, every: Duration) -> Self {
        self.batch = every;
        self
    }

    /// Sends at most `max` events of a batch for the event log.
    #[must_use]
    pub fn max_batch_events(mut self, max: usize) -> Self {
        self.max_batch_events = max;
        self
    }

    /// Listens on `addr`.
    #[must_use]
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Uses `token` as the bearer token.
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Serves no control route: the page watches only.
    #[must_use]
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }
}

/// An inspector that could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectorError {
    /// Its address could not be bound.
    #[error("the inspector cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The token given is empty or not printable ASCII (it travels in a header).
    #[error("an inspector token must be printable ASCII without spaces, and not empty")]
    Token,
}

/// A running inspector. Stop it with [`Inspector::stop`]; dropping it stops it too.
pub struct Inspector {
    addr: SocketAddr,
    token: String,
    read_only: bool,
    stop: CancellationToken,
    served: Option<tokio::task::JoinHandle<()>>,
}

impl Inspector {
    /// Serves `tree`'s inspector on `config.addr`.
    ///
    /// # Errors
    ///
    /// [`InspectorError::Bind`] when the address cannot be bound, [`InspectorError::Token`]
    /// for a token that cannot travel in a header.
    pub async fn serve(
        tree: Arc<Tree>,
        config: InspectorConfig,
    ) -> Result<Inspector, InspectorError> {
        Inspector::start(routes::Source::Live(tree), config).await
    }

    /// Serves a journal rewound ([`Timeline::read`]): the page scrubs through its events
    /// and shows the tree as it was at any of them. Always read-only.
    ///
    /// ```no_run
    /// use agent_tree_inspector::{Inspector, InspectorConfig, Timeline};
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let timeline = Timeline::read(std::path::Path::new("tree.journal"))?;
    /// let inspector = Inspector::rewind(timeline, InspectorConfig::default()).await?;
    /// println!("open {}", inspector.url());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Inspector::serve`].
    pub async fn rewind(
        timeline: Timeline,
        config: InspectorConfig,
    ) -> Result<Inspector, InspectorError> {
        Inspector::start(
            routes::Source::Rewind(Arc::new(timeline)),
            config.read_only(),
        )
        .await
    }

    async fn start(
        source: routes::Source,
        config: InspectorConfig,
    ) -> Result<Inspector, InspectorError> {
        let token = match config.token.clone() {
            Some(token) if auth::valid_token(&token) => token,
            Some(_) => return Err(InspectorError::Token),
            None => auth::new_token(),
        };
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| InspectorError::Bind {
                addr: config.addr,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| InspectorError::Bind {
                addr: config.addr,
                source,
            })?;
        let stop = CancellationToken::new();
        let guard = Arc::new(auth::Guard::new(token.clone(), addr));
        let app = routes::router(source, guard, config.clone(), stop.clone());
        let stopped = stop.clone();
        let served = tokio::spawn(async move {
            let serving =
                axum::serve(listener, app).with_graceful_shutdown(stopped.cancelled_owned());
            if let Err(error) = serving.await {
                tracing::warn!(%error, "the inspector stopped serving");
            }
        });
        tracing::info!(%addr, read_only = config.read_only, "inspector serving");
        Ok(Inspector {
            addr,
            token,
            read_only: config.read_only,
            stop,
            served: Some(served),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bearer token requests must carry.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether it serves no control route.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// The page's address, with its token: open it in a browser.
    pub fn url(&self) -> String {
        format!("http://{}/?token={}", self.addr, self.token)
    }

    /// Stops serving: open streams end, the listener closes, and connections still open
    /// after [`STOP_WAIT`] (a client that never finishes its request) are dropped.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(mut served) = self.served.take() {
            if tokio::time::timeout(STOP_WAIT, &mut served).await.is_err() {
                served.abort();
                let _ = served.await;
            }
        }
    }
}

/// Never shows the token.
impl std::fmt::Debug for Inspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspector")
            .field("addr", &self.addr)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// How long [`Inspector::stop`] waits for open connections to finish before it drops them.
pub const STOP_WAIT: Duration = Duration::from_secs(1);

impl Drop for Inspector {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
