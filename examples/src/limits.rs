//! What the examples bound their resources with: settings read from the environment, and a
//! counted slot among a bounded number.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The environment variable `name` parsed as a `T`, or `default` when it is absent or does
/// not parse.
pub fn setting<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// One of at most `max` holders of `count`, released when dropped.
#[derive(Debug)]
pub struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A slot of `count`, unless `max` are held already.
    pub fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        if count.fetch_add(1, Ordering::AcqRel) >= max {
            count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot(count.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
