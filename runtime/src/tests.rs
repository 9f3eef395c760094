//! Runtime-level tests of the behaviours SPEC §1 names, with the crate's private hooks.
