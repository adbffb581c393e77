//! The core integration tests, one binary: identity and places, records, usage, events,
//! snapshots, an agent's run with the scripted model, failures and child exits. Each module
//! is one behaviour (formerly its own test binary; one binary links once).

#[path = "../support/mod.rs"]
mod support;

mod agent_file_frontmatter;
mod delegation_entries_every_format;
mod events_envelope;
mod failure_isolation;
mod fold_rebuilds_snapshot;
mod journal_open;
mod journal_questions;
mod journal_recovery;
mod journal_stops;
mod journal_untrusted_content;
mod journal_writes;
mod lifecycle_child_exit;
mod model_calls_bounded;
mod model_contract;
mod model_facing_golden;
mod orchestration_tool_inputs;
mod output_retention;
mod output_retention_reads;
mod output_retention_store;
mod partial_output;
mod records_persist;
mod recovery_repeated;
mod recovery_resumes;
mod results_read_by_id;
mod resume_read_back;
mod review32;
mod review_issue10;
mod review_journal2;
mod scripted_model_turns;
mod shutdown_overrun;
mod snapshot_render;
mod testkit_experiment;
mod testkit_faults;
mod testkit_owner;
mod testkit_pair;
mod testkit_probe;
mod tool_calls_by_position;
mod tool_input;
mod toolbox_tool_names;
mod tools_unknown_name;
mod tracing_spans;
mod tree_control_calls;
mod tree_depth_parent;
mod trial4;
mod trial_issue10;
mod usage_before_settle;
mod usage_random_trees;
