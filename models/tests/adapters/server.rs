//! A tiny HTTP/1.1 server on 127.0.0.1 that answers scripted replies in order and records
//! each request, for tests of the adapters against the real wire formats.
//!
//! Hand-rolled on tokio rather than a mock crate: tests must see a connection close (the
//! abort tests) and control every byte of a stream (split events, cut-off bodies).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// One scripted reply.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    /// Body pieces, each written after its delay.
    pieces: Vec<(Duration, Vec<u8>)>,
    chunked: bool,
    /// Wait before the head.
    delay: Duration,
    /// Close after the pieces without ending the chunked body.
    cut: bool,
    /// Never answer; report when the client closes the connection.
    hang: bool,
}

impl Reply {
    /// A JSON body.
    pub(crate) fn json(status: u16, body: Value) -> Reply {
        Reply::raw(status, "application/json", body.to_string().into_bytes())
    }

    /// A body of `content_type`.
    pub(crate) fn raw(status: u16, content_type: &str, body: Vec<u8>) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            pieces: vec![(Duration::ZERO, body)],
            chunked: false,
            delay: Duration::ZERO,
            cut: false,
            hang: false,
        }
    }

    /// A server-sent event stream written in `pieces` (chunked, a little apart).
    pub(crate) fn sse<S: AsRef<[u8]>>(pieces: impl IntoIterator<Item = S>) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            pieces: pieces
                .into_iter()
                .map(|p| (Duration::from_millis(5), p.as_ref().to_vec()))
                .collect(),
            chunked: true,
            delay: Duration::ZERO,
            cut: false,
            hang: false,
        }
    }

    /// A server-sent event stream whose pieces are each written after their own delay (the
    /// head at once): a server that answers at once and then processes the prompt, or a
    /// stream that stalls.
    pub(crate) fn sse_timed<S: AsRef<[u8]>>(
        pieces: impl IntoIterator<Item = (Duration, S)>,
    ) -> Reply {
        Reply {
            pieces: pieces
                .into_iter()
                .map(|(delay, p)| (delay, p.as_ref().to_vec()))
                .collect(),
            ..Reply::sse(Vec::<Vec<u8>>::new())
        }
    }

    /// A request that is never answered.
    pub(crate) fn hang() -> Reply {
        Reply {
            hang: true,
            ..Reply::raw(200, "application/json", Vec::new())
        }
    }

    /// The same reply with a header.
    pub(crate) fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The same reply after `delay`.
    pub(crate) fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    /// The same (chunked) reply cut off before its end.
    pub(crate) fn cut(mut self) -> Reply {
        self.cut = true;
        self
    }
}

/// A request the server received.
#[derive(Clone, Debug)]
pub(crate) struct Recorded {
    pub(crate) path: String,
    /// Header names lowercased.
    pub(crate) headers: HashMap<String, String>,
    pub(crate) body: Value,
}

/// The running server; stops with the test's runtime.
pub(crate) struct Server {
    pub(crate) base: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    received: Arc<Notify>,
    closed: Arc<Notify>,
    closes: Arc<AtomicUsize>,
}

impl Server {
    /// Serves `replies` in order (the last one again once they run out).
    pub(crate) async fn start(replies: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}/v1", listener.local_addr().expect("addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let received = Arc::new(Notify::new());
        let closed = Arc::new(Notify::new());
        let closes = Arc::new(AtomicUsize::new(0));
        let replies = Arc::new(replies);
        let next = Arc::new(AtomicUsize::new(0));
        let shared = (
            requests.clone(),
            received.clone(),
            closed.clone(),
            closes.clone(),
        );
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let n = next.fetch_add(1, Ordering::SeqCst);
                let reply = replies[n.min(replies.len() - 1)].clone();
                let (requests, received, closed, closes) = shared.clone();
                tokio::spawn(async move {
                    let _ = serve(socket, reply, &requests, &received, &closed, &closes).await;
                });
            }
        });
        Server {
            base,
            requests,
            received,
            closed,
            closes,
        }
    }

    /// Every request so far.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().clone()
    }

    /// The body of request `n` (from 0).
    pub(crate) fn body(&self, n: usize) -> Value {
        self.requests()[n].body.clone()
    }

    /// Waits until `n` requests have come.
    pub(crate) async fn until_received(&self, n: usize) {
        loop {
            let wait = self.received.notified();
            if self.requests.lock().len() >= n {
                return;
            }
            wait.await;
        }
    }

    /// Waits (at most `limit`) until a hanging request's connection was closed by the
    /// client; whether it was.
    pub(crate) async fn until_closed(&self, limit: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.closed.notified();
                if self.closes.load(Ordering::SeqCst) > 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }
}

async fn serve(
    mut socket: TcpStream,
    reply: Reply,
    requests: &Mutex<Vec<Recorded>>,
    received: &Notify,
    closed: &Notify,
    closes: &AtomicUsize,
) -> std::io::Result<()> {
    let recorded = read_request(&mut socket).await?;
    requests.lock().push(recorded);
    received.notify_waiters();
    if reply.hang {
        let mut buf = [0u8; 1024];
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        closes.fetch_add(1, Ordering::SeqCst);
        closed.notify_waiters();
        return Ok(());
    }
    tokio::time::sleep(reply.delay).await;
    let mut head = format!(
        "HTTP/1.1 {} Scripted\r\nconnection: close\r\n",
        reply.status
    );
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if reply.chunked {
        head.push_str("transfer-encoding: chunked\r\n\r\n");
    } else {
        let length: usize = reply.pieces.iter().map(|(_, p)| p.len()).sum();
        head.push_str(&format!("content-length: {length}\r\n\r\n"));
    }
    socket.write_all(head.as_bytes()).await?;
    socket.flush().await?;
    for (delay, piece) in &reply.pieces {
        tokio::time::sleep(*delay).await;
        if reply.chunked {
            if piece.is_empty() {
                continue;
            }
            socket
                .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                .await?;
            socket.write_all(piece).await?;
            socket.write_all(b"\r\n").await?;
        } else {
            socket.write_all(piece).await?;
        }
        socket.flush().await?;
    }
    if reply.chunked && !reply.cut {
        socket.write_all(b"0\r\n\r\n").await?;
    }
    socket.flush().await?;
    socket.shutdown().await
}

pub(crate) async fn read_request(socket: &mut TcpStream) -> std::io::Result<Recorded> {
    let mut buf = Vec::new();
    let mut piece = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = socket.read(&mut piece).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&piece[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or_default()
        .to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut piece).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&piece[..n]);
    }
    Ok(Recorded {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}
