//! The lifetime integration tests, one binary: aborts (cascades, queued agents, random aborts
//! and shutdowns around construction), detached children, drain against abort, wait policies
//! and shutdown with its one deadline. Each module is one behaviour (formerly its own test
//! binary; one binary links once).

#[path = "../support/mod.rs"]
mod support;

mod abort_pre_session_random;
mod abort_queued_never_starts;
mod abort_subtree_cascade;
mod control_as_an_agent_starts;
mod crash_kill;
mod cut_off_streams;
mod deferred_exits;
mod detached_children_of_resumed_owners;
mod ended_runs_keep_calls_answered;
mod events_fold_for_any_subscriber;
mod first_turn_races;
mod large_tables_and_shared_records;
mod lifetimes_detached_boundary;
mod lifetimes_drain_vs_abort;
mod question_and_steer_races_mt;
mod questions_and_waits;
mod races_mt;
mod shutdown_countdown_and_backstop;
mod shutdown_leaves_no_actor_alive;
mod shutdown_of_one_agent;
mod shutdown_one_deadline;
mod shutdown_reports_and_later_runs;
mod shutdowns_overlap;
mod temporary_agents_keep_their_task;
mod turn_poll_mt;
mod wait_policies_outcomes;
