//! The control integration tests, one binary: who may steer, read, resume and abort whom
//! (the ownership matrix, foreign ids, steer receipts, resume rules, waits and results), and
//! questions to owners with completion notices. Each module is one behaviour (formerly its own
//! test binary; one binary links once).

#[path = "../support/mod.rs"]
mod support;

mod agent_file_spawns_and_models;
mod control_answers_to_questions;
mod control_ask_owner_and_notices;
mod control_foreign_ids;
mod control_resume_rules;
mod control_steer_receipts;
mod control_wait_and_results;
mod every_call_answered;
mod model_boundary;
mod ownership_control_matrix;
