//! A worker node running as a child process, driven from the owner's side: started,
//! asked for its `stats`, killed, frozen and thawed.

use std::io::BufRead as _;
use std::time::Duration;

/// A worker node running as a child process, seen from the owner's side.
#[derive(Debug)]
pub(crate) struct WorkerProcess {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl WorkerProcess {
    /// Starts `command` (a program that runs [`run_worker`](super::run_worker)) and waits,
    /// at most 30 s, until it prints `worker ready`.
    pub(crate) fn start(command: std::process::Command) -> WorkerProcess {
        let mut worker = Self::spawn(command);
        worker.expect_line("worker ready");
        worker
    }

    /// Starts `command` with a deferred join and waits until its node is up (`worker
    /// started`); [`WorkerProcess::join`] makes it join.
    pub(crate) fn start_deferred(mut command: std::process::Command) -> WorkerProcess {
        command.env("AGENT_TREE_CLUSTER_DEFER_JOIN", "1");
        let mut worker = Self::spawn(command);
        worker.expect_line("worker started");
        worker
    }

    /// Tells a deferred worker to join its owner, and waits until it has.
    pub(crate) fn join(&mut self) {
        use std::io::Write as _;
        let stdin = self.stdin.as_mut().expect("the worker's stdin is open");
        writeln!(stdin, "join").expect("the worker reads its stdin");
        stdin.flush().expect("the worker reads its stdin");
        self.expect_line("worker ready");
    }

    /// The worker process's resident memory, in KiB (Linux).
    pub(crate) fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }

    fn spawn(mut command: std::process::Command) -> WorkerProcess {
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("the worker process starts");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        WorkerProcess {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    fn expect_line(&mut self, prefix: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(error) => panic!("the worker never printed {prefix:?}: {error}"),
            }
        }
    }

    /// The worker's hosted live agents and the total tokens its hosted trees billed.
    pub(crate) fn stats(&mut self) -> (usize, u64) {
        let (live, tokens, _) = self.stats_with_edges();
        (live, tokens)
    }

    /// As [`WorkerProcess::stats`], with the worker's hosted edges.
    pub(crate) fn stats_with_edges(&mut self) -> (usize, u64, usize) {
        use std::io::Write as _;
        let stdin = self.stdin.as_mut().expect("the worker's stdin is open");
        writeln!(stdin, "stats").expect("the worker reads its stdin");
        stdin.flush().expect("the worker reads its stdin");
        let line = self.expect_line("stats ");
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(|v| v.parse::<u64>().ok())
                .expect("a stats line")
        };
        (
            field("live=") as usize,
            field("tokens="),
            field("edges=") as usize,
        )
    }

    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} failed");
    }

    /// `kill -9`, and waits for the process to be gone.
    pub(crate) fn kill9(&mut self) {
        self.signal("-KILL");
        let _ = self.child.wait();
    }

    /// SIGSTOP: the process freezes (its connections stay open). Returns once every thread
    /// of it is stopped: `kill` returns when the signal is sent, and a thread running on the
    /// other core goes on until it is next interrupted, long enough to read a frame sent
    /// right after (a shutdown "to a frozen node" that the node then answered). The kernel
    /// offers no event for "stopped" to a non-parent, so this reads each thread's state in
    /// `/proc` until all are `T`, for at most 5 s.
    pub(crate) fn freeze(&self) {
        self.signal("-STOP");
        let tasks = format!("/proc/{}/task", self.child.id());
        let stopped = || {
            std::fs::read_dir(&tasks).is_ok_and(|entries| {
                entries.filter_map(Result::ok).all(|task| {
                    std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                        stat.rsplit_once(')')
                            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['T', 't']))
                    })
                })
            })
        };
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !stopped() {
            assert!(
                std::time::Instant::now() < give_up,
                "the worker did not stop within 5 s of SIGSTOP"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// SIGCONT.
    pub(crate) fn thaw(&self) {
        self.signal("-CONT");
    }

    /// Closes its stdin (it exits) and waits for it.
    pub(crate) fn finish(mut self) {
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
