//! A task's future is pinned in its cell from its first poll on, so `Pin`'s drop guarantee
//! holds: it is dropped at the address it was polled at, on every path that ends it (finish,
//! abort, shutdown, a destructor that panics). Futures that link themselves into intrusive
//! lists (any `Notify`-style waiter) rely on this; a moved future leaves the list pointing at
//! freed memory.

use futures::channel::oneshot;
use runtime::prelude::*;
use runtime::{Config, Context, Error, Runner, SpinnerConfig};
use std::future::Future;
use std::marker::PhantomPinned;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;

/// Removes a runner's storage directory when the test ends.
struct Storage(PathBuf);

impl Drop for Storage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(workers: usize) -> (Config, Storage) {
    let config = Config::new()
        .with_worker_threads(workers)
        .with_idle_spinner(SpinnerConfig::disabled())
        .with_catch_panics(true);
    let storage = Storage(config.storage_directory().clone());
    (config, storage)
}

/// Where a probe was polled and where it was dropped.
#[derive(Default)]
struct Addresses {
    polled: Vec<usize>,
    dropped: Option<usize>,
}

/// A `!Unpin` future that never finishes, records its own address at every poll and at its
/// drop, and reports the drop on a channel.
struct Probe {
    addresses: Arc<Mutex<Addresses>>,
    polled: Option<oneshot::Sender<()>>,
    dropped: Option<oneshot::Sender<()>>,
    panic_on_drop: bool,
    _pinned: PhantomPinned,
}

impl Probe {
    fn new(
        addresses: &Arc<Mutex<Addresses>>,
        panic_on_drop: bool,
    ) -> (Self, oneshot::Receiver<()>, oneshot::Receiver<()>) {
        let (polled, polled_rx) = oneshot::channel();
        let (dropped, dropped_rx) = oneshot::channel();
        let probe = Self {
            addresses: addresses.clone(),
            polled: Some(polled),
            dropped: Some(dropped),
            panic_on_drop,
            _pinned: PhantomPinned,
        };
        (probe, polled_rx, dropped_rx)
    }
}

impl Future for Probe {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut std::task::Context<'_>) -> Poll<()> {
        let address = std::ptr::from_ref::<Self>(&self) as usize;
        // SAFETY: only the sender is taken out; nothing pinned moves.
        let this = unsafe { self.get_unchecked_mut() };
        this.addresses.lock().unwrap().polled.push(address);
        if let Some(polled) = this.polled.take() {
            let _ = polled.send(());
        }
        Poll::Pending
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.addresses.lock().unwrap().dropped = Some(std::ptr::from_ref::<Self>(self) as usize);
        if let Some(dropped) = self.dropped.take() {
            let _ = dropped.send(());
        }
        if self.panic_on_drop {
            panic!("the probe's destructor panics");
        }
    }
}

/// Asserts that the probe was polled at least once, always at one address, and dropped there.
fn assert_dropped_where_polled(addresses: &Mutex<Addresses>) {
    let addresses = addresses.lock().unwrap();
    let first = *addresses.polled.first().expect("the probe was polled");
    assert!(
        addresses.polled.iter().all(|&address| address == first),
        "the probe moved between polls: {:x?}",
        addresses.polled
    );
    assert_eq!(
        addresses.dropped,
        Some(first),
        "the probe was polled at {first:#x} but dropped elsewhere"
    );
}

/// Spawns a probe as a task of the given placement.
fn spawn_probe(context: &Context, placement: &str, probe: Probe) -> runtime::Handle<()> {
    let context = match placement {
        "pool" => context.clone(),
        "dedicated" => context.clone().dedicated(),
        "blocking" => context.clone().shared(true),
        other => unreachable!("no placement {other}"),
    };
    context.spawn(move |_| probe)
}

/// An aborted task's future is dropped where it was polled, whatever its placement, and also
/// when its destructor panics (the panic is contained and the handle says `Closed`).
#[rstest::rstest]
fn an_aborted_future_is_dropped_where_it_was_polled(
    #[values("pool", "dedicated", "blocking")] placement: &str,
    #[values(false, true)] panic_on_drop: bool,
) {
    let (config, _storage) = config(2);
    let addresses = Arc::new(Mutex::new(Addresses::default()));
    let probe_addresses = addresses.clone();
    Runner::new(config).start(move |context| async move {
        let (probe, polled, dropped) = Probe::new(&probe_addresses, panic_on_drop);
        let handle = spawn_probe(&context, placement, probe);
        polled.await.expect("the probe is polled");
        handle.abort();
        assert_eq!(handle.await, Err(Error::Closed));
        dropped.await.expect("the aborted probe is dropped");
    });
    assert_dropped_where_polled(&addresses);
}

/// A task still pending when the root returns is dropped by shutdown where it was polled.
#[rstest::rstest]
fn a_future_cleared_by_shutdown_is_dropped_where_it_was_polled(
    #[values("pool", "dedicated", "blocking")] placement: &str,
    #[values(false, true)] panic_on_drop: bool,
) {
    let (config, _storage) = config(2);
    let addresses = Arc::new(Mutex::new(Addresses::default()));
    let probe_addresses = addresses.clone();
    Runner::new(config).start(move |context| async move {
        let (probe, polled, _dropped) = Probe::new(&probe_addresses, panic_on_drop);
        // Detached: the handle is dropped, the task lives on until shutdown clears it.
        drop(spawn_probe(&context, placement, probe));
        polled.await.expect("the probe is polled");
    });
    assert_dropped_where_polled(&addresses);
}

/// A future nested inside an async block (the usual case: a local of the task's body) stays
/// where the cell pinned the block.
#[test]
fn a_probe_inside_an_async_block_is_dropped_where_it_was_polled() {
    let (config, _storage) = config(1);
    let addresses = Arc::new(Mutex::new(Addresses::default()));
    let probe_addresses = addresses.clone();
    Runner::new(config).start(move |context| async move {
        let (probe, polled, dropped) = Probe::new(&probe_addresses, false);
        let handle = context.clone().spawn(move |_| async move {
            let before = std::hint::black_box([0u8; 64]);
            probe.await;
            std::hint::black_box(before);
        });
        polled.await.expect("the probe is polled");
        handle.abort();
        assert_eq!(handle.await, Err(Error::Closed));
        dropped.await.expect("the aborted probe is dropped");
    });
    assert_dropped_where_polled(&addresses);
}
