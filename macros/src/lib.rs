//! Attribute macros for the runtime (`#[runtime::main]`, `#[runtime::test]`) and for actors
//! (`#[actor]`).
//!
//! This crate is filled by the issue "#[runtime::main] and #[runtime::test], with compile-error
//! tests" and the actors issue. Until then it exports no macro: nothing here pretends to work.
