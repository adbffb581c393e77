//! The lifetime integration tests, one binary: aborts (cascades, queued agents, random aborts
//! and shutdowns around construction), detached children, drain against abort, wait policies
//! and shutdown with its one deadline. Each module is one behaviour (formerly its own test
//! binary; one binary links once).

#[path = "../support/mod.rs"]
mod support;

mod abort_pre_session_random;
mod abort_queued_never_starts;
mod abort_subtree_cascade;
mod crash_kill;
mod lifetimes_detached_boundary;
mod lifetimes_drain_vs_abort;
mod races_mt;
mod review10;
mod review11;
mod review12;
mod review18;
mod review19;
mod review20;
mod review27;
mod review5;
mod review8;
mod review9;
mod shutdown_one_deadline;
mod turn_poll_mt;
mod wait_policies_outcomes;
