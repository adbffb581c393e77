//! A stdio server's child process, in a process group of its own, so that ending the server
//! ends every process it started (`npx` runs the server as its grandchild).
//!
//! The graceful end is the one MCP's stdio transport describes, bounded by the tree's
//! deadline: its standard input closed, SIGTERM to the whole group halfway to the deadline,
//! SIGKILL at it. The group is killed also when the process handle is dropped, so no path
//! leaves a server behind.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::Instant;

use crate::config::Transport;

/// How many of the last standard-error lines a failure names.
const KEPT_LINES: usize = 8;
/// How much of one standard-error line is kept.
const KEPT_LINE_BYTES: usize = 400;
/// How long a killed group may take to be gone before the end gives up waiting for it
/// (within the shutdown's allowance past its deadline).
const REAP_WAIT: Duration = Duration::from_millis(80);

/// A running server process.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Child,
    /// Its process group (its own pid).
    group: Option<u32>,
    /// Its last standard-error lines.
    stderr: Arc<Mutex<VecDeque<String>>>,
}

/// A server's input and output, for the MCP transport.
pub(crate) type Pipes = (ChildStdout, ChildStdin);

impl ServerProcess {
    /// Starts `transport`'s command in a new process group, its standard error drained into
    /// the log (as `server`'s) and the last lines kept.
    pub(crate) fn spawn(
        server: &str,
        transport: &Transport,
    ) -> Result<(ServerProcess, Pipes), String> {
        let Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } = transport
        else {
            return Err("not a stdio server".to_owned());
        };
        let mut cmd = Command::new(command);
        cmd.args(args)
            .envs(env)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        #[cfg(unix)]
        cmd.process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("`{command}` could not be run: {e}"))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the process's pipes were not opened".to_owned());
        };
        let kept = Arc::new(Mutex::new(VecDeque::new()));
        tokio::spawn(drain(server.to_owned(), stderr, kept.clone()));
        let process = ServerProcess {
            group: child.id(),
            child,
            stderr: kept,
        };
        Ok((process, (stdout, stdin)))
    }

    /// The process group, while it may hold processes.
    pub(crate) fn group(&self) -> Option<u32> {
        self.group
    }

    /// Its last standard-error lines, for a failure's message (empty when it wrote none).
    pub(crate) fn last_words(&self) -> String {
        let lines = self.stderr.lock();
        if lines.is_empty() {
            return String::new();
        }
        let joined: Vec<&str> = lines.iter().map(String::as_str).collect();
        format!("; its standard error ended: {}", joined.join(" | "))
    }

    /// How the process ended, if it has.
    pub(crate) fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// Ends the process group by `deadline`, its standard input already closed (the
    /// transport is gone): waits for the process until halfway there, then SIGTERM to the
    /// group, then SIGKILL at the deadline. Whatever is left of the group then is killed
    /// too (children the server left behind).
    pub(crate) async fn end(mut self, deadline: Instant) {
        let now = Instant::now();
        let halfway = now + deadline.saturating_duration_since(now) / 2;
        if tokio::time::timeout_at(halfway, self.child.wait())
            .await
            .is_err()
        {
            self.signal(Signal::Term);
            let _ = tokio::time::timeout_at(deadline, self.child.wait()).await;
        }
        // Whatever is left of the group now (the process, or children it left behind) is
        // killed, and given a moment to be gone: a killed process ends when the kernel gets
        // to it, and only the leader is ours to wait for.
        self.signal(Signal::Kill);
        let until = Instant::now() + REAP_WAIT;
        let _ = tokio::time::timeout_at(until, self.child.wait()).await;
        if let Some(group) = self.group.take() {
            while live_in_group(group) > 0 && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }

    /// Kills the whole group now.
    pub(crate) fn kill(&mut self) {
        self.signal(Signal::Kill);
        let _ = self.child.start_kill();
    }

    fn signal(&self, signal: Signal) {
        if let Some(group) = self.group {
            signal_group(group, signal);
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.signal(Signal::Kill);
    }
}

/// The signals a server's group is sent.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Signal {
    Term,
    Kill,
}

/// Sends `signal` to every process of `group` (nothing where there are no process groups).
pub(crate) fn signal_group(group: u32, signal: Signal) {
    #[cfg(unix)]
    {
        use nix::sys::signal::{Signal as Sig, killpg};
        let Ok(group) = i32::try_from(group) else {
            return;
        };
        let sig = match signal {
            Signal::Term => Sig::SIGTERM,
            Signal::Kill => Sig::SIGKILL,
        };
        // ESRCH: the group is empty already.
        let _ = killpg(nix::unistd::Pid::from_raw(group), sig);
    }
    #[cfg(not(unix))]
    let _ = (group, signal);
}

/// Whether process `pid` is alive: it exists and has not exited (a zombie has). Read from
/// `/proc` on Linux; elsewhere always `true` (nothing is known).
pub(crate) fn alive(pid: u32) -> bool {
    #[cfg(target_os = "linux")]
    {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| live_group(&stat))
            .is_some()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        true
    }
}

/// The process group of the process a `/proc/<pid>/stat` line describes, if it is alive
/// (not a zombie, not dead): `pid (comm) state ppid pgrp ...`, where comm may hold spaces
/// and parentheses.
#[cfg(target_os = "linux")]
fn live_group(stat: &str) -> Option<u32> {
    let (_, after) = stat.rsplit_once(')')?;
    let mut fields = after.split_whitespace();
    let state = fields.next()?;
    let pgrp = fields.nth(1)?.parse().ok()?;
    (state != "Z" && state != "X").then_some(pgrp)
}

/// How many processes of `group` are alive (zombies, which only wait to be reaped by their
/// parent, are not). Read from `/proc` on Linux; elsewhere 1 while the group has any
/// process at all.
pub(crate) fn live_in_group(group: u32) -> usize {
    #[cfg(target_os = "linux")]
    {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return 0;
        };
        entries
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| live_group(stat) == Some(group))
            .count()
    }
    #[cfg(all(unix, not(target_os = "linux")))]
    {
        let Ok(group) = i32::try_from(group) else {
            return 0;
        };
        usize::from(nix::sys::signal::killpg(nix::unistd::Pid::from_raw(group), None).is_ok())
    }
    #[cfg(not(unix))]
    {
        let _ = group;
        0
    }
}

/// Reads a server's standard error to its end: each line to the log at debug level, the
/// last few kept (each cut). Bounded whatever the server writes: a line without an end is
/// cut, not gathered.
async fn drain(
    server: String,
    mut stderr: tokio::process::ChildStderr,
    kept: Arc<Mutex<VecDeque<String>>>,
) {
    let mut buf = vec![0u8; 8192];
    let mut line = Vec::new();
    let push = |line: &mut Vec<u8>| {
        let text = String::from_utf8_lossy(line).trim_end().to_owned();
        line.clear();
        if text.is_empty() {
            return;
        }
        tracing::debug!(server = %server, "MCP server stderr: {text}");
        let mut lines = kept.lock();
        if lines.len() == KEPT_LINES {
            lines.pop_front();
        }
        lines.push_back(text);
    };
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &byte in &buf[..n] {
            if byte == b'\n' {
                push(&mut line);
            } else if line.len() < KEPT_LINE_BYTES {
                line.push(byte);
            }
        }
    }
    push(&mut line);
}
