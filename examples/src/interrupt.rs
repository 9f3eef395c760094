//! Ctrl-C (SIGINT) and SIGTERM as a graceful runtime stop, through the runtime's own
//! [`Context::signal`](runtime::Context::signal). A second signal during a stuck shutdown
//! ends the process at once (exit status 130), as a second Ctrl-C does for most servers; it
//! is watched from a thread of its own, which a runtime that is shutting down does not stop.

use futures::future::{Either, select};
use runtime::{Signal, Spawner as _};
use std::time::Duration;

/// Stops `context`'s runtime (value 0, `grace` for its tasks to finish) on the first SIGINT
/// or SIGTERM, and ends the process on the second. The waits are made here, so a signal that
/// arrives right after this call is not missed; the task that holds them ends with the
/// runtime and holds nothing up.
pub fn stop_on_interrupt(context: &runtime::Context, grace: Duration) {
    let first = either_signal(context);
    let watcher = context.clone();
    let stopper = context.clone();
    drop(context.clone().spawn(move |_| async move {
        if let Err(error) = first.await {
            eprintln!("signals cannot be watched ({error}); Ctrl-C ends the process at once");
            return;
        }
        // The second signal is watched off the runtime: a shutdown stuck waiting for a thread
        // (whose tasks the runtime has already aborted) must still hear it. Made once the
        // first resolved, so it waits for a delivery after that one.
        let second = either_signal(&watcher);
        std::thread::spawn(move || {
            if futures::executor::block_on(second).is_ok() {
                eprintln!("second signal: exiting without waiting for the shutdown");
                std::process::exit(130);
            }
        });
        let _ = stopper.stop(0, Some(grace)).await;
    }));
}

/// The first of SIGINT and SIGTERM from now on.
fn either_signal(
    context: &runtime::Context,
) -> impl std::future::Future<Output = Result<(), runtime::Error>> + Send + 'static {
    let interrupt = context.signal(Signal::Interrupt);
    let terminate = context.signal(Signal::Terminate);
    async move {
        match select(interrupt, terminate).await {
            Either::Left((outcome, _)) | Either::Right((outcome, _)) => outcome,
        }
    }
}
