//! A small HTTP/1.1 client for the inspector's tests: requests with any headers (a browser's
//! `Origin`, a foreign `Host`), and a reader of its server-sent events.

#![allow(dead_code, reason = "each test binary uses part of it")]

use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A response: its status and body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: String,
}

/// Sends `method path` to `addr` with `headers` (a `Host` of the address unless given) and
/// `body`, and reads the whole response.
pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Response {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(head.as_bytes()).await.unwrap();
    // Read the head, then the body by its length (a server may keep the connection open),
    // chunked, or to the end.
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).await.unwrap();
    let status = status_line[9..12].parse().unwrap();
    let (mut length, mut chunked) = (None, false);
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).await.unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(n) = lower.strip_prefix("content-length:") {
            length = n.trim().parse::<usize>().ok();
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let body = if let Some(n) = length {
        let mut bytes = vec![0; n];
        reader.read_exact(&mut bytes).await.unwrap();
        String::from_utf8_lossy(&bytes).into_owned()
    } else if chunked {
        let mut body = Vec::new();
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).await.unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk).await.unwrap();
            body.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&body).into_owned()
    } else {
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).await.unwrap();
        String::from_utf8_lossy(&rest).into_owned()
    };
    Response { status, body }
}

/// The bearer header of `token`.
pub(crate) fn bearer(token: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {token}"))
}

/// A watcher's stream of batches (`GET /api/events`), each as JSON.
pub(crate) struct Events {
    lines: tokio::io::Lines<BufReader<TcpStream>>,
}

impl Events {
    /// Opens the stream with `token`.
    pub(crate) async fn open(addr: SocketAddr, token: &str) -> Events {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "GET /api/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut lines = BufReader::new(stream).lines();
        let status = lines.next_line().await.unwrap().unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        Events { lines }
    }

    /// The next batch.
    /// (A `reset`, which tells the page to read the snapshot again, is `{}`.)
    pub(crate) async fn next(&mut self) -> serde_json::Value {
        while let Some(line) = self.lines.next_line().await.unwrap() {
            if let Some(data) = line.strip_prefix("data: ") {
                return serde_json::from_str(data).unwrap();
            }
        }
        panic!("the stream ended");
    }

    /// Reads batches until one holds a row for which `found` holds; returns that row.
    pub(crate) async fn until(
        &mut self,
        found: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        loop {
            let batch = self.next().await;
            let rows = batch["rows"].as_array().into_iter().flatten();
            if let Some(row) = rows.into_iter().find(|r| found(r)) {
                return row.clone();
            }
        }
    }

    /// Reads to the stream's end (or an error of its connection).
    pub(crate) async fn end(&mut self) {
        while let Ok(Some(_)) = self.lines.next_line().await {}
    }
}
