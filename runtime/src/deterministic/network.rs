//! The test's hand on a deterministic run's simulated network: links, partitions, resets, and
//! the host a task dials from.
//!
//! Inside a run, `context.bind`, `context.dial` and the halves they make are simulated: a
//! listener is found by its address, a connection is two byte pipes whose segments arrive
//! after their link's latency plus a jitter drawn from the seed, each pipe holds at most a
//! window of unread bytes (a writer waits for room), and faults are the ones TCP can show:
//! delay (a partition holds bytes until it heals), a reset that both ends see, a refused or
//! timed-out dial. Bytes are never lost silently nor reordered.
//!
//! Hosts: a connection's ends are addresses, and links and partitions are set between their
//! IPs. A listener's IP is the one it binds (or the one dialed, for an unspecified bind); a
//! dial comes from the host set by [`on_host`] around the polling future, else from the
//! loopback address.
//!
//! Invariants:
//! - Every change made here is recorded by the run's auditor, and takes effect at the
//!   virtual instant of the call, so a test that partitions at a given point replays exactly.
//! - A handle is only made inside a run, and only reaches that run's network.

use crate::simulation::Simulation;
use crate::simulation::network::with_host;
pub use crate::simulation::network::{Link, NetworkFaults};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The simulated network of the deterministic run on this thread.
///
/// # Panics
///
/// Outside a deterministic run.
pub fn network() -> NetworkControl {
    let simulation = crate::simulation::with_current(Arc::clone)
        .expect("deterministic::network() is only available inside a deterministic run");
    NetworkControl { simulation }
}

/// Controls a deterministic run's simulated network (see [`network`]).
#[derive(Clone, Debug)]
pub struct NetworkControl {
    simulation: Arc<Simulation>,
}

impl NetworkControl {
    /// Sets the link both ways between `a` and `b` (for a one-way setting, see
    /// [`set_link_one_way`](Self::set_link_one_way)): segments sent from then on take its
    /// latency plus a jitter drawn from the seed.
    pub fn set_link(&self, a: IpAddr, b: IpAddr, link: Link) {
        self.set_link_one_way(a, b, link);
        self.set_link_one_way(b, a, link);
    }

    /// Sets the link from `from` to `to` only.
    pub fn set_link_one_way(&self, from: IpAddr, to: IpAddr, link: Link) {
        self.simulation
            .network()
            .set_link(&self.simulation, from, to, link);
    }

    /// Partitions `a` from `b` both ways: bytes between them that have not arrived are held
    /// until a heal, and a dial between them times out.
    pub fn partition(&self, a: IpAddr, b: IpAddr) {
        self.partition_one_way(a, b);
        self.partition_one_way(b, a);
    }

    /// Blocks the direction from `from` to `to` only: `from`'s bytes to `to` are held, the
    /// other way flows; a dial either way times out (a handshake needs both).
    pub fn partition_one_way(&self, from: IpAddr, to: IpAddr) {
        self.simulation.network().block(&self.simulation, from, to);
    }

    /// Heals the partition between `a` and `b` (both ways): held bytes leave now, in order.
    pub fn heal(&self, a: IpAddr, b: IpAddr) {
        self.simulation
            .network()
            .unblock(&self.simulation, Some(&[(a, b), (b, a)]));
    }

    /// Heals every partition.
    pub fn heal_all(&self) {
        self.simulation.network().unblock(&self.simulation, None);
    }

    /// Resets every connection with an end on `host`: both ends' receives fail (after the
    /// bytes that had arrived) and their sends fail, with `ConnectionReset`.
    pub fn reset_connections(&self, host: IpAddr) {
        self.simulation.network().reset_host(&self.simulation, host);
    }
}

/// Runs `future` as a task of the host `host`: every dial it makes (while it is polled) comes
/// from `host`, so links and partitions set on `host` apply to its connections. Tasks it
/// spawns are not on `host` unless wrapped too.
pub fn on_host<F: Future>(host: IpAddr, future: F) -> OnHost<F> {
    OnHost { host, future }
}

/// The future of [`on_host`].
#[derive(Debug)]
pub struct OnHost<F> {
    host: IpAddr,
    future: F,
}

impl<F: Future> Future for OnHost<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `future` is structurally pinned: it is never moved out of `self` nor
        // reached unpinned, and `OnHost` has no `Drop` impl that could move it.
        let this = unsafe { self.get_unchecked_mut() };
        let host = this.host;
        // SAFETY: as above, `future` stays where it is for as long as `self` is pinned.
        let future = unsafe { Pin::new_unchecked(&mut this.future) };
        with_host(host, || future.poll(cx))
    }
}
