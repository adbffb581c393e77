//! The core integration tests, one binary: identity and places, records, usage, events,
//! snapshots, an agent's run with the scripted model, failures and child exits. Each module
//! is one behaviour (formerly its own test binary; one binary links once).

#[path = "../support/mod.rs"]
mod support;

mod background_children_waits;
mod events_envelope;
mod failure_isolation;
mod fold_rebuilds_snapshot;
mod journal_compaction_cadence;
mod journal_output_readback;
mod journal_questions;
mod journal_recovery;
mod journal_resumed_conversations;
mod journal_steps;
mod journal_tally_and_clock;
mod journal_writes;
mod last_turn_refusals;
mod lifecycle_child_exit;
mod model_calls_bounded;
mod model_contract;
mod model_facing_golden;
mod model_retries_virtual_time;
mod output_retention;
mod records_persist;
mod research_team;
mod results_read_by_id;
mod resume_read_back;
mod review21;
mod review22;
mod review24;
mod review26;
mod review29;
mod review30;
mod review33;
mod review_issue11;
mod review_issue11b;
mod review_issue9;
mod review_retention;
mod review_today;
mod scripted_model_turns;
mod shutdown_one_deadline;
mod small_catalogs;
mod snapshot_render;
mod supervision_under_faults;
mod testkit_child_probes;
mod testkit_event_expectations;
mod testkit_experiment;
mod testkit_experiment_rows;
mod testkit_fault_plans;
mod testkit_faults;
mod testkit_guide;
mod testkit_owner;
mod testkit_owner_messages;
mod testkit_pair;
mod testkit_pair_team;
mod testkit_probe;
mod tool_calls_by_position;
mod tools_delegation_entries;
mod tools_unknown_name;
mod tracing_spans;
mod tree_depth_parent;
mod usage_before_settle;
mod usage_random_trees;
