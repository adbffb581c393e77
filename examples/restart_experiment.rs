//! A supervision-restart experiment: a supervisor runs three workers whose model calls fail
//! with a probability; sweep the restart intensity and period against the failure rate for
//! `one_for_one`, `one_for_all` and `rest_for_one`, 40 seeded trials each, in virtual time.
//!
//! `cargo run --release --example restart_experiment` prints the table, writes every trial
//! to `target/restart_experiment/trials.csv`, the table to `.../summary.csv`, and plots the
//! escalation probability against the failure rate per strategy in `.../escalation.svg`.
//! The same seeds give the same table, every run.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use agent_tree::prelude::*;
use agent_tree::protocol::{Strategy, ToolCall};
use agent_tree::testkit::{FaultyModel, experiment};
use agent_tree::{BoxFuture, ModelRequest, ModelResponse};
use plotters::prelude::*;

const TRIALS: u32 = 40;
const WORKERS: u64 = 3;
const RATES: [f64; 6] = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5];
const STRATEGIES: [(Strategy, &str); 3] = [
    (Strategy::OneForOne, "one_for_one"),
    (Strategy::OneForAll, "one_for_all"),
    (Strategy::RestForOne, "rest_for_one"),
];
/// (max restarts, period in ms).
const INTENSITIES: [(u32, u64); 3] = [(1, 5_000), (3, 5_000), (3, 1_000)];

/// The supervisor starts the workers, waits for all of them, then answers; each worker
/// answers at once (its work time is [`WorkTime`]'s).
struct Plan;

/// Each worker call takes a second of (virtual) work before the model behind it, faults
/// included, answers: a worker crashes after working, as a real one does.
struct WorkTime<M>(M);

impl<M: Model> Model for WorkTime<M> {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            if request.agent_type() == "worker" {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            self.0.turn(request).await
        })
    }
}

impl Model for Plan {
    fn turn(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let usage = Usage::tokens(20, 5);
            if request.agent_type() == "worker" {
                return Ok(ModelResponse::text("done").with_usage(usage));
            }
            let response = match request.turn {
                1 => ModelResponse::calls(
                    (0..WORKERS)
                        .map(|i| {
                            ToolCall::new(
                                format!("spawn{i}"),
                                "Agent",
                                serde_json::json!({
                                    "agent_type": "worker",
                                    "prompt": format!("part {i}"),
                                    "background": true
                                }),
                            )
                        })
                        .collect(),
                ),
                2 => {
                    let ids: Vec<String> = (0..WORKERS)
                        .map(|i| AgentId::new(2 + i).to_string())
                        .collect();
                    ModelResponse::calls(vec![ToolCall::new(
                        "wait",
                        "wait_subagents",
                        serde_json::json!({ "agent_ids": ids }),
                    )])
                }
                _ => ModelResponse::text("all parts done"),
            };
            Ok(response.with_usage(usage))
        })
    }
}

/// One configuration of the sweep and what its trials did.
struct Cell {
    strategy: &'static str,
    max_restarts: u32,
    period_ms: u64,
    rate: f64,
    escalation: f64,
    restarts: f64,
    recover_ms: f64,
    tokens: f64,
}

fn trials(
    strategy: Strategy,
    max_restarts: u32,
    period_ms: u64,
    rate: f64,
    seed: u64,
) -> Vec<experiment::TrialRow> {
    experiment::run_trials(TRIALS, seed, move |seed| {
        Box::pin(async move {
            let catalog = Catalog::new([
                AgentDefinition::new("supervisor", "You supervise.")
                    .with_allowed_subagents(SubagentAllowance::only(["worker"]))
                    .with_supervision(strategy, max_restarts, period_ms)
                    .with_restart(RestartPolicy::Temporary),
                AgentDefinition::new("worker", "You work.").with_restart(RestartPolicy::Transient),
            ])
            .expect("the catalog is valid");
            let model = WorkTime(
                FaultyModel::new(Plan)
                    .fail_with_probability(rate, seed, ModelError::new("worker crashed"))
                    .only_for("worker"),
            );
            let tree = Tree::builder()
                .catalog(catalog)
                .model(model)
                .build()
                .await
                .expect("the tree builds");
            (tree, SpawnRequest::new("supervisor", "run the parts"))
        })
    })
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum / f64::from(n) }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/restart_experiment");
    std::fs::create_dir_all(&out)?;
    let mut trials_csv = String::from("strategy,max_restarts,period_ms,failure_rate,");
    trials_csv.push_str(experiment::to_csv(&[]).lines().next().unwrap_or_default());
    trials_csv.push('\n');
    let mut cells = Vec::new();
    let mut seed = 1u64;
    for &(strategy, name) in &STRATEGIES {
        for &(max_restarts, period_ms) in &INTENSITIES {
            for &rate in &RATES {
                let rows = trials(strategy, max_restarts, period_ms, rate, seed);
                seed += u64::from(TRIALS);
                for line in experiment::to_csv(&rows).lines().skip(1) {
                    writeln!(
                        trials_csv,
                        "{name},{max_restarts},{period_ms},{rate},{line}"
                    )?;
                }
                let escalated = rows.iter().filter(|r| r.escalations > 0).count();
                cells.push(Cell {
                    strategy: name,
                    max_restarts,
                    period_ms,
                    rate,
                    escalation: escalated as f64 / rows.len() as f64,
                    restarts: mean(rows.iter().map(|r| r.restarts as f64)),
                    recover_ms: mean(rows.iter().filter_map(|r| r.recover_ms).map(|ms| ms as f64)),
                    tokens: mean(rows.iter().map(|r| r.tokens as f64)),
                });
            }
        }
    }

    let mut table =
        String::from("strategy      intensity  rate  escalated  restarts  recover_ms  tokens\n");
    let mut summary = String::from(
        "strategy,max_restarts,period_ms,failure_rate,escalation_probability,mean_restarts,mean_recover_ms,mean_tokens\n",
    );
    for c in &cells {
        writeln!(
            table,
            "{:<13} {:>2}/{:<5}ms {:>5.2} {:>9.2} {:>9.2} {:>11.0} {:>7.0}",
            c.strategy,
            c.max_restarts,
            c.period_ms,
            c.rate,
            c.escalation,
            c.restarts,
            c.recover_ms,
            c.tokens
        )?;
        writeln!(
            summary,
            "{},{},{},{},{:.4},{:.4},{:.1},{:.1}",
            c.strategy,
            c.max_restarts,
            c.period_ms,
            c.rate,
            c.escalation,
            c.restarts,
            c.recover_ms,
            c.tokens
        )?;
    }
    print!("{table}");
    std::fs::write(out.join("trials.csv"), trials_csv)?;
    std::fs::write(out.join("summary.csv"), summary)?;

    let plot = out.join("escalation.svg");
    {
        let root = SVGBackend::new(&plot, (720, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Escalation probability (intensity 3 restarts / 5 s)",
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d(0.0..0.55, 0.0..1.0)?;
        chart
            .configure_mesh()
            .x_desc("worker failure rate per model call")
            .y_desc("escalated trials")
            .draw()?;
        for (i, &(_, name)) in STRATEGIES.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let points: Vec<(f64, f64)> = cells
                .iter()
                .filter(|c| c.strategy == name && c.max_restarts == 3 && c.period_ms == 5_000)
                .map(|c| (c.rate, c.escalation))
                .collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    println!("wrote {}", out.join("trials.csv").display());
    println!("wrote {}", out.join("summary.csv").display());
    println!("wrote {}", plot.display());
    Ok(())
}
