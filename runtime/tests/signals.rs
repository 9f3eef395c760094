//! `Context::signal`: process signals as futures. One test, in a binary of its own, because
//! the handlers and deliveries are the process's: parallel tests would see each other's.

use futures::FutureExt as _;
use runtime::Signal;
use runtime::prelude::*;

fn send(signal: libc::c_int) {
    // SAFETY: `kill` to this process with a signal whose handler the waits installed.
    assert_eq!(unsafe { libc::kill(libc::getpid(), signal) }, 0);
}

/// A lost wake-up fails the test by its timeout instead of hanging it.
#[runtime::test(timeout = "30s")]
async fn waits_resolve_on_their_signal_only_and_the_process_survives_it(context: runtime::Context) {
    {
        // Made before the delivery, first polled after it.
        let early = context.signal(Signal::Terminate);
        let interrupt = context.signal(Signal::Interrupt);
        // Polled and parked on another task before the delivery.
        let parked = context
            .clone()
            .spawn(|context| async move { context.signal(Signal::Terminate).await });
        runtime::reschedule().await;

        // Without the handler, SIGTERM would end this test's process here.
        send(libc::SIGTERM);
        assert_eq!(parked.await, Ok(Ok(())), "a parked wait is woken");
        assert_eq!(
            early.await,
            Ok(()),
            "a wait made before the delivery sees it"
        );

        let after = context.signal(Signal::Terminate);
        let mut after = std::pin::pin!(after);
        assert!(
            after.as_mut().now_or_never().is_none(),
            "a wait made after a delivery waits for the next one"
        );
        let mut interrupt = std::pin::pin!(interrupt);
        assert!(
            interrupt.as_mut().now_or_never().is_none(),
            "a SIGTERM does not resolve a wait for SIGINT"
        );

        send(libc::SIGINT);
        assert_eq!(interrupt.await, Ok(()));
        send(libc::SIGTERM);
        assert_eq!(after.await, Ok(()));
    }
}
