//! trybuild cases for every error `#[runtime::main]` and `#[runtime::test]` report, with their
//! `.stderr` snapshots, and pass cases for every accepted form: see `tests/ui.rs`,
//! `tests/fail/` and `tests/pass/`; the same for `#[actor]`.

#![warn(missing_docs, missing_debug_implementations)]
