//! The protocol's wire tests, one binary: golden fixtures round-trip (`golden`), and
//! malformed input is refused without panicking (`malformed`). The fixtures are in
//! `tests/fixtures/`.

mod golden;
mod journal;
mod malformed;
