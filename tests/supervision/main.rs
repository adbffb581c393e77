//! The supervision integration tests, one binary: the restart matrix (owner, policy, reason),
//! strategies with escalation, and the restart intensity window. Each module is one behaviour
//! (formerly its own test binary; one binary links once).

#[path = "../support/mod.rs"]
mod support;

mod supervision_intensity_window;
mod supervision_restart_boundary;
mod supervision_restart_matrix;
mod supervision_strategy_escalation;
