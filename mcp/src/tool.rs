//! One tool of one server, as the tree offers it: `mcp__<server>__<tool>`, called on the
//! server's live connection under the call's timeout, cancelled (the protocol's
//! `notifications/cancelled`) when the calling agent is aborted, killed or shut down, its
//! result made into text the model reads.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agent_tree_actors::{BoxFuture, Tool, ToolContext, ToolError};
use agent_tree_protocol::ToolSpec;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest,
    ProgressToken, RequestId, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::Value;
use tokio::time::Instant;

use crate::content::tool_output;
use crate::server::Server;

/// A server's tool.
pub(crate) struct McpTool {
    pub(crate) server: Arc<Server>,
    /// The server's name for it.
    pub(crate) remote: String,
    /// As offered: `mcp__<server>__<tool>`.
    pub(crate) spec: ToolSpec,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.spec.name)
            .finish_non_exhaustive()
    }
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(&self, context: ToolContext, input: Value) -> BoxFuture<'_, Result<String, ToolError>> {
        Box::pin(async move {
            let result = self.call_server(context, input).await;
            self.server.count_call(result.is_err());
            result.map_err(ToolError::new)
        })
    }

    fn server(&self) -> Option<&str> {
        Some(&self.server.name)
    }
}

impl McpTool {
    async fn call_server(&self, context: ToolContext, input: Value) -> Result<String, String> {
        let server = &self.server.name;
        let timeout = self.server.config.timeout_of(&self.remote, &self.spec.name);
        let deadline = Instant::now() + timeout;
        let arguments = match input {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return Err(format!(
                    "`{}` takes an object of arguments, not {}",
                    self.spec.name,
                    crate::content::cut(other.to_string(), 200)
                ));
            }
        };
        let mut retried = false;
        loop {
            let (peer, generation) = self.server.link(deadline).await?;
            let mut params = CallToolRequestParams::new(self.remote.clone());
            params.arguments = arguments.clone();
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
            let sent = if peer.is_transport_closed() || self.server.process_gone() {
                Err(ServiceError::TransportClosed)
            } else {
                peer.send_cancellable_request(request, PeerRequestOptions::no_options())
                    .await
            };
            let handle = match sent {
                Ok(handle) => handle,
                // Never written: the connection was gone before the call. Once, on the
                // connection the supervisor brings up instead.
                Err(error) if !retried && not_sent(&error) => {
                    retried = true;
                    self.lose(generation, deadline).await;
                    continue;
                }
                Err(error) => return Err(self.failed(generation, &error, deadline).await),
            };
            let mut out = Outstanding::new(&self.server, &peer, &handle, context.clone());
            let answer = tokio::time::timeout_at(deadline, handle.await_response()).await;
            let Ok(answer) = answer else {
                // `out` sends the cancellation as it drops.
                return Err(format!(
                    "MCP server `{server}` did not answer `{}` within {timeout:?}; the call was cancelled",
                    self.remote
                ));
            };
            out.answered = true;
            return match answer {
                Ok(ServerResult::CallToolResult(result)) => {
                    let value = serde_json::to_value(&result).unwrap_or_default();
                    let (text, is_error) = tool_output(&value, self.server.config.max_output_bytes);
                    if is_error { Err(text) } else { Ok(text) }
                }
                Ok(_) => Err(format!(
                    "MCP server `{server}` answered the call with something else than a tool result"
                )),
                // The write failed: the server never read it.
                Err(ServiceError::TransportSend(_)) if !retried => {
                    retried = true;
                    drop(out);
                    self.lose(generation, deadline).await;
                    continue;
                }
                Err(error) => Err(self.failed(generation, &error, deadline).await),
            };
        }
    }

    /// Tells the supervisor this call saw connection `generation` close, and waits for it
    /// to have taken it down.
    async fn lose(&self, generation: u64, deadline: Instant) {
        let why = format!("a call of `{}` saw the connection close", self.remote);
        self.server.lost(generation, why, deadline).await;
    }

    /// The model's error for a call that failed with `error`; a closed connection is told
    /// to the supervisor, which restarts the server.
    async fn failed(&self, generation: u64, error: &ServiceError, deadline: Instant) -> String {
        let server = &self.server.name;
        match error {
            ServiceError::McpError(e) => {
                let message = crate::content::cut(e.message.to_string(), 2000);
                format!(
                    "MCP server `{server}` refused the call of `{}`: {message}",
                    self.remote
                )
            }
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                self.lose(generation, deadline).await;
                format!(
                    "MCP server `{server}` went away during the call of `{}` (it is being restarted); whether the call took effect is unknown",
                    self.remote
                )
            }
            other => format!(
                "the call of `{}` on MCP server `{server}` failed: {other}",
                self.remote
            ),
        }
    }
}

/// Whether `error`, from sending a request, says it was never written (the connection was
/// closed before it): it may be sent again.
fn not_sent(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportSend(_) | ServiceError::TransportClosed
    )
}

/// A request out: its progress route is removed when it drops, and, unanswered (the call
/// timed out, or the agent's task was cancelled), the server is told it is cancelled.
struct Outstanding {
    server: Arc<Server>,
    peer: Peer<RoleClient>,
    id: RequestId,
    token: ProgressToken,
    answered: bool,
}

impl Outstanding {
    /// The request `handle` of a call by `call`, its progress routed to it.
    fn new(
        server: &Arc<Server>,
        peer: &Peer<RoleClient>,
        handle: &rmcp::service::RequestHandle<RoleClient>,
        call: ToolContext,
    ) -> Self {
        server.progress.route(handle.progress_token.clone(), call);
        server.calls_out.fetch_add(1, Ordering::Relaxed);
        Outstanding {
            server: server.clone(),
            peer: peer.clone(),
            id: handle.id.clone(),
            token: handle.progress_token.clone(),
            answered: false,
        }
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.server.calls_out.fetch_sub(1, Ordering::Relaxed);
        // Answered, its last progress may still be on its way (rmcp hands each
        // notification to a task of its own, the answer straight to the call): the route
        // stays a moment. Unanswered, nothing of it is wanted any more.
        self.server.progress.unroute(&self.token, self.answered);
        if self.answered {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        let params = CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("the calling agent no longer waits for it".to_owned()),
        );
        tracing::debug!(server = %self.server.name, request = %self.id, "cancelling an MCP call");
        runtime.spawn(async move {
            let _ = peer.notify_cancelled(params).await;
        });
    }
}
