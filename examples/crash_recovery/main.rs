//! Crash recovery, for real: each trial starts a child process running a tree that writes a
//! journal (synced per entry), kills it with SIGKILL at a random moment, recovers the tree
//! from the journal, resumes the interrupted agents to completion and verifies it. Then it
//! prints, once every trial has been checked:
//!
//! ```text
//! trials=<n> duplicates=0 lost_results=0 corrupt=0
//! questions_kept=<n> of <m> tasks_kept=<k> of <l>
//! ```
//!
//! `duplicates` counts parts spawned twice for one lead (one owner and request), and
//! `lost_results` outcomes the child reported settled (and journaled) before the kill that
//! recovery cannot read back; `corrupt` counts journals recovery refused. `m` counts the
//! agents the kills found waiting on a question, `n` those that came back waiting (not
//! interrupted) and completed with the answer read once, their asking turn not re-run; `l`
//! the agents the kills found admitted but before their first turn, `k` those that did
//! their own task once resumed.
//!
//! ```text
//! cargo run --release --example crash_recovery -- --trials 200
//! ```

mod scenario;

use std::process::Command;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let path = std::path::PathBuf::from(&args[1]);
        let seed: u64 = args[2].parse().expect("a seed");
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(scenario::run_child(&path, seed));
        return;
    }
    let trials: u32 = match args.iter().position(|a| a == "--trials") {
        Some(i) => args
            .get(i + 1)
            .and_then(|n| n.parse().ok())
            .expect("--trials takes a number"),
        None => 20,
    };
    let dir = std::env::temp_dir().join(format!("agent-tree-crash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let exe = std::env::current_exe().expect("this program's path");
    let mut total = scenario::Found::default();
    let mut mid_work = 0u32;
    for n in 0..trials {
        let journal = scenario::journal_path(&dir, n);
        let seed = 0x5eed_0000 + u64::from(n);
        // Kill anywhere from before the first spawn to after most of the work.
        let kill_after = Duration::from_millis(3 + (seed.wrapping_mul(2_654_435_761) >> 7) % 45);
        let mut child = Command::new(&exe);
        child.arg("--child").arg(&journal).arg(seed.to_string());
        let found = scenario::trial(child, &journal, seed, kill_after);
        total.duplicates += found.duplicates;
        total.lost_results += found.lost_results;
        total.corrupt += found.corrupt;
        total.interrupted += found.interrupted;
        total.reported += found.reported;
        total.released += found.released;
        total.questions += found.questions;
        total.questions_kept += found.questions_kept;
        total.tasks += found.tasks;
        total.tasks_kept += found.tasks_kept;
        mid_work += u32::from(found.interrupted > 0);
        let _ = std::fs::remove_file(&journal);
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "trials={trials} duplicates={} lost_results={} corrupt={}",
        total.duplicates, total.lost_results, total.corrupt
    );
    println!(
        "questions_kept={} of {} tasks_kept={} of {}",
        total.questions_kept, total.questions, total.tasks_kept, total.tasks
    );
    // How much the kills cut into (on stderr: stdout is the one line above).
    eprintln!(
        "info: {mid_work} of {trials} kills came mid-work; {} agents interrupted, {} outcomes \
         reported before the kills, {} of them released and read back from the journal",
        total.interrupted, total.reported, total.released
    );
    if (total.duplicates, total.lost_results, total.corrupt) != (0, 0, 0)
        || total.questions_kept != total.questions
        || total.tasks_kept != total.tasks
    {
        std::process::exit(1);
    }
}
