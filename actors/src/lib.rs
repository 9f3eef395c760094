//! Typed actors with bounded mailboxes, supervised child scopes and OTP restart strategies.
//!
//! This crate is filled by the issue "Actors: #[actor], typed refs, bounded mailboxes,
//! supervised child scopes, OTP ...". Until then it exports nothing: nothing here pretends to
//! work.
