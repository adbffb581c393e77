//! The spawning integration tests, one binary: who may spawn what (orchestration tools, strict
//! name resolution, depth caps, attenuated tools, agent files and their tool names) and how
//! spawns are admitted (the admission storm, the FIFO pool, limits from settings). Each module
//! is one behaviour (formerly its own test binary; one binary links once).

#[path = "../support/mod.rs"]
mod support;

mod admission_storm_bounds;
mod agent_files;
mod allowlist_case;
mod attenuation_owner_tools;
mod capability_orchestration_tools;
mod depth_caps_and_forgery;
mod limits_from_settings;
mod pool_fifo_queue;
mod resolution_strict_names;
