//! [`ThreadBound`]: a `Send` future that builds a future which need not be `Send` on the
//! thread that first polls it, and from then on never lets it leave that thread. What runs a
//! dedicated or blocking actor whose state is not `Send`: the task crosses threads only as
//! its `Send` builder, before the state exists.
//!
//! Invariants:
//! - The built future is created, polled and dropped only on the thread that first polled
//!   the `ThreadBound` (its `home`). A poll from another thread panics before touching it;
//!   a drop on another thread leaks it instead of running its destructor there.
//! - The builder is `Send` and is the only thing a `ThreadBound` holds before its first
//!   poll, so moving an unpolled one between threads moves nothing that is not `Send`.
//! - The runtime polls and drops a dedicated or blocking task's future on that task's own
//!   thread (an abort wakes the task so its own poll drops it; the worker clears the task on
//!   its thread when it ends), so the leak is a guard against a bug, not a path taken.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::thread::ThreadId;

thread_local! {
    /// This thread's id, read once: `thread::current()` costs a reference count per call.
    static THREAD: ThreadId = std::thread::current().id();
}

/// The current thread's id; `None` while its thread-locals are being destroyed.
fn current() -> Option<ThreadId> {
    THREAD.try_with(|id| *id).ok()
}

/// See the module documentation.
pub(crate) struct ThreadBound<B, F> {
    /// The builder, until the first poll.
    build: Option<B>,
    /// The built future and the thread it belongs to. Boxed: it is never moved once built,
    /// and the box lets a drop on a foreign thread leak it whole.
    built: Option<(ThreadId, Pin<Box<F>>)>,
}

impl<B, F> ThreadBound<B, F>
where
    B: FnOnce() -> F,
    F: Future,
{
    pub(crate) fn new(build: B) -> Self {
        ThreadBound {
            build: Some(build),
            built: None,
        }
    }
}

// SAFETY: a `ThreadBound` owns a `B` (sent with it, hence `B: Send`) and, once polled, an
// `F` that it touches only on the thread that built it: `poll` checks the thread before
// reaching it, and `drop` leaks it on any other thread. No `&self` method exists, so sharing
// a reference exposes nothing. Moving the `ThreadBound` itself moves only the box pointer.
unsafe impl<B: Send, F> Send for ThreadBound<B, F> {}

// The builder is never pinned and the built future is pinned in its own box.
impl<B, F> Unpin for ThreadBound<B, F> {}

impl<B, F> Future for ThreadBound<B, F>
where
    B: FnOnce() -> F,
    F: Future,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let here = current().expect("a task is polled while its thread's thread-locals live");
        let (home, future) = match &mut this.built {
            Some(built) => built,
            built @ None => {
                let build = this
                    .build
                    .take()
                    .expect("a ThreadBound holds its builder until it is built");
                built.insert((here, Box::pin(build())))
            }
        };
        assert!(
            *home == here,
            "a thread-bound future was polled off the thread that built it"
        );
        future.as_mut().poll(cx)
    }
}

impl<B, F> Drop for ThreadBound<B, F> {
    fn drop(&mut self) {
        if let Some((home, future)) = self.built.take()
            && current() != Some(home)
        {
            // Its destructor may not run here (see the `Send` proof): leaking is safe.
            std::mem::forget(future);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;
    use std::task::Waker;

    fn assert_send<T: Send>(_: &T) {}

    thread_local! {
        /// `Local`s dropped on this thread.
        static DROPS: Cell<u32> = const { Cell::new(0) };
    }

    /// State that is not `Send` (it holds an `Rc`); counts its drops per thread.
    struct Local {
        _not_send: Rc<()>,
    }

    impl Local {
        fn new() -> Self {
            Local {
                _not_send: Rc::new(()),
            }
        }
    }

    impl Drop for Local {
        fn drop(&mut self) {
            DROPS.with(|drops| drops.set(drops.get() + 1));
        }
    }

    #[test]
    fn builds_on_the_first_polling_thread() {
        let built_on = std::sync::Arc::new(std::sync::Mutex::new(None));
        let seen = built_on.clone();
        let bound = ThreadBound::new(move || {
            *seen.lock().unwrap() = Some(std::thread::current().id());
            // Not `Send`: an `Rc` lives across the await.
            let state = Rc::new(Cell::new(1u32));
            async move {
                std::future::ready(()).await;
                state.set(state.get() + 1);
                state.get()
            }
        });
        assert_send(&bound);
        assert!(built_on.lock().unwrap().is_none(), "built only when polled");
        let output = std::thread::spawn(move || {
            let mut bound = bound;
            let here = std::thread::current().id();
            let output = Pin::new(&mut bound).poll(&mut Context::from_waker(Waker::noop()));
            (here, output)
        })
        .join()
        .unwrap();
        assert_eq!(output.1, Poll::Ready(2));
        assert_eq!(*built_on.lock().unwrap(), Some(output.0));
    }

    #[test]
    fn a_pending_future_is_dropped_on_its_own_thread() {
        let (drops_tx, drops_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut bound = ThreadBound::new(move || {
                let local = Local::new();
                async move {
                    std::future::pending::<()>().await;
                    drop(local);
                }
            });
            let waker = Waker::noop();
            assert!(
                Pin::new(&mut bound)
                    .poll(&mut Context::from_waker(waker))
                    .is_pending()
            );
            drop(bound);
            drops_tx.send(DROPS.with(Cell::get)).unwrap();
        })
        .join()
        .unwrap();
        assert_eq!(
            drops_rx.recv().unwrap(),
            1,
            "dropped once, where it was built"
        );
    }

    #[test]
    fn an_unpolled_one_drops_its_builder_anywhere() {
        let drops = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        struct Counted(std::sync::Arc<std::sync::atomic::AtomicU32>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let counted = Counted(drops.clone());
        let bound = ThreadBound::new(move || {
            let _counted = counted;
            async {}
        });
        std::thread::spawn(move || drop(bound)).join().unwrap();
        assert_eq!(drops.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn a_poll_off_its_thread_panics_without_touching_it() {
        let polls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = polls.clone();
        let mut bound = ThreadBound::new(move || {
            std::future::poll_fn(move |_| {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Poll::<()>::Pending
            })
        });
        let waker = Waker::noop();
        assert!(
            Pin::new(&mut bound)
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
        let (outcome, bound) = std::thread::spawn(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _ = Pin::new(&mut bound).poll(&mut Context::from_waker(Waker::noop()));
            }));
            (outcome, bound)
        })
        .join()
        .unwrap();
        let payload = outcome.expect_err("a foreign poll panics");
        let message = payload.downcast_ref::<&str>().copied().unwrap_or_default();
        assert!(message.contains("off the thread"), "{message}");
        assert_eq!(
            polls.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "not polled there"
        );
        // Back home, it drops as usual.
        drop(bound);
    }

    /// A drop off its thread leaks the future rather than run its destructor there. Not
    /// under Miri, which reports the (intended) leak.
    #[cfg(not(miri))]
    #[test]
    fn a_drop_off_its_thread_leaks_the_future() {
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let (dropped_tx, dropped_rx) = std::sync::mpsc::channel::<()>();
        let home = std::thread::spawn(move || {
            let mut bound = ThreadBound::new(move || {
                let local = Local::new();
                async move {
                    std::future::pending::<()>().await;
                    drop(local);
                }
            });
            assert!(
                Pin::new(&mut bound)
                    .poll(&mut Context::from_waker(Waker::noop()))
                    .is_pending()
            );
            bound_tx.send(bound).unwrap();
            dropped_rx.recv().unwrap();
            DROPS.with(Cell::get)
        });
        drop(bound_rx.recv().unwrap());
        assert_eq!(DROPS.with(Cell::get), 0, "the destructor did not run here");
        dropped_tx.send(()).unwrap();
        assert_eq!(home.join().unwrap(), 0, "nor on its own thread");
    }
}
