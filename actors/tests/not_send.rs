//! Actors whose state is not `Send`, on dedicated and blocking threads: built there by a
//! `Send` factory (`spawn_with`), started, handled and dropped there (thread ids asserted),
//! spawned from another actor, restarted by a supervisor and run by a dynamic supervisor on
//! the same terms; their refs are `Send + Sync` all the same. A factory that panics ends the
//! actor with its panic.

use actors::prelude::*;
use actors::supervisor::{ChildSpec, DynamicSupervisor, Strategy, Supervisor};
use actors::{Context, ExitReason};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::{self, ThreadId};

/// What happened on which thread, in order: `("built" | "started" | "handled" | "dropped",
/// thread)`.
type Trace = Arc<Mutex<Vec<(&'static str, ThreadId)>>>;

fn record(trace: &Trace, what: &'static str) {
    trace.lock().push((what, thread::current().id()));
}

/// One turn of the scheduler: an await point for state held across it.
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

/// The body of both placements' actors: an `Rc` (not `Send`) held across awaits.
macro_rules! local_actor {
    ($name:ident, $placement:ident) => {
        #[actor($placement)]
        struct $name {
            history: Rc<RefCell<Vec<u64>>>,
            trace: Trace,
        }

        impl $name {
            fn new(trace: Trace) -> Self {
                record(&trace, "built");
                $name {
                    history: Rc::default(),
                    trace,
                }
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                record(&self.trace, "dropped");
            }
        }

        #[actor]
        impl $name {
            fn on_start(&mut self) {
                record(&self.trace, "started");
            }

            /// Appends `value` after an await that the `Rc` lives across.
            async fn push(&mut self, value: u64) -> Vec<u64> {
                let history = self.history.clone();
                yield_once().await;
                history.borrow_mut().push(value);
                record(&self.trace, "handled");
                history.borrow().clone()
            }

            fn fail(&mut self) {
                panic!("{} fails", stringify!($name));
            }
        }
    };
}

local_actor!(Dedicated, dedicated);
local_actor!(Blocking, blocking);

fn assert_ref<R: Clone + Send + Sync + 'static>(_: &R) {}

/// The threads the trace names, each once, in order of first appearance.
fn threads(trace: &Trace) -> Vec<ThreadId> {
    let mut threads = Vec::new();
    for (_, thread) in trace.lock().iter() {
        if !threads.contains(thread) {
            threads.push(*thread);
        }
    }
    threads
}

/// Everything in the trace ran on one thread, which is not the caller's.
fn assert_one_thread_not_this_one(trace: &Trace) {
    let threads = threads(trace);
    assert_eq!(
        threads.len(),
        1,
        "one thread for its whole life: {threads:?}"
    );
    assert_ne!(threads[0], thread::current().id());
}

/// The events of the trace, without their threads.
fn events(trace: &Trace) -> Vec<&'static str> {
    trace.lock().iter().map(|(what, _)| *what).collect()
}

/// A dedicated actor's state is built, started, handled (asks from this task and from a
/// pool task) and dropped on one thread, which is not the caller's.
#[runtime::test(timeout = "20s")]
async fn state_that_is_not_send_lives_on_its_dedicated_thread(context: runtime::Context) {
    let trace = Trace::default();
    let made = trace.clone();
    let local = Dedicated::spawn_with(&context, move || Dedicated::new(made));
    assert_ref(&local);
    assert_eq!(local.push(1).await, Ok(vec![1]));
    let remote = local.clone();
    let from_a_task = context
        .clone()
        .spawn(move |_| async move { remote.push(2).await })
        .await
        .unwrap();
    assert_eq!(from_a_task, Ok(vec![1, 2]));
    assert_eq!(local.stop().await, ExitReason::Stopped);
    assert_eq!(
        events(&trace),
        ["built", "started", "handled", "handled", "dropped"]
    );
    assert_one_thread_not_this_one(&trace);
}

/// The same for a blocking actor.
#[runtime::test(timeout = "20s")]
async fn state_that_is_not_send_lives_on_its_blocking_thread(context: runtime::Context) {
    let trace = Trace::default();
    let made = trace.clone();
    let local = Blocking::spawn_with(&context, move || Blocking::new(made));
    assert_eq!(local.push(7).await, Ok(vec![7]));
    assert_eq!(local.push(8).await, Ok(vec![7, 8]));
    assert_eq!(local.stop().await, ExitReason::Stopped);
    assert_eq!(
        events(&trace),
        ["built", "started", "handled", "handled", "dropped"]
    );
    assert_one_thread_not_this_one(&trace);
}

/// An actor spawns a child that is not `Send` from its context; the child lives on its own
/// thread, not its parent's.
#[runtime::test(timeout = "20s")]
async fn an_actor_spawns_a_child_that_is_not_send(context: runtime::Context) {
    #[actor]
    struct Parent {
        trace: Trace,
    }

    #[actor]
    impl Parent {
        fn child(&self, ctx: &mut Context<Self>) -> (DedicatedRef, ThreadId) {
            let trace = self.trace.clone();
            let child = ctx.spawn_with(move || Dedicated::new(trace));
            (child, thread::current().id())
        }
    }

    let trace = Trace::default();
    let parent = Parent {
        trace: trace.clone(),
    }
    .spawn(&context);
    let (child, parent_thread) = parent.child().await.unwrap();
    assert_eq!(child.push(3).await, Ok(vec![3]));
    assert_eq!(child.stop().await, ExitReason::Stopped);
    let threads = threads(&trace);
    assert_eq!(threads.len(), 1, "{threads:?}");
    assert_ne!(threads[0], parent_thread);
}

/// Checks a supervised child's trace: two incarnations, each built, started, handled once
/// and dropped on one thread; on two distinct threads when `fresh_threads` (dedicated; a
/// blocking restart may land on the parked thread of the last one).
fn check_two_incarnations(trace: &Trace, fresh_threads: bool) {
    let trace = trace.lock().clone();
    let incarnations: Vec<_> = trace
        .split_inclusive(|(what, _)| *what == "dropped")
        .collect();
    assert_eq!(incarnations.len(), 2, "{trace:?}");
    for incarnation in &incarnations {
        let events: Vec<_> = incarnation.iter().map(|(what, _)| *what).collect();
        assert_eq!(events, ["built", "started", "handled", "dropped"]);
        let home = incarnation[0].1;
        assert!(
            incarnation.iter().all(|(_, thread)| *thread == home),
            "one incarnation, one thread: {incarnation:?}"
        );
        assert_ne!(home, thread::current().id());
    }
    if fresh_threads {
        assert_ne!(incarnations[0][0].1, incarnations[1][0].1, "a thread each");
    }
}

/// A supervisor restarts a child that is not `Send`, of the placement `$actor` has: each
/// incarnation is built by the spec's factory on its own thread and dropped there, the
/// failed one included (on a fresh thread each when `$fresh_threads`).
macro_rules! restart_test {
    ($name:ident, $actor:ident, $fresh_threads:expr) => {
        #[runtime::test(timeout = "20s", catch_panics = true)]
        async fn $name(context: runtime::Context) {
            let trace = Trace::default();
            let made = trace.clone();
            let mut supervisor = Supervisor::new("locals", Strategy::OneForOne);
            let local = supervisor.child(ChildSpec::new(move || $actor::new(made.clone())));
            let supervisor = supervisor.spawn(&context);
            assert_eq!(local.push(1).await, Ok(vec![1]));
            assert!(local.fail().await.is_err());
            // The next incarnation has fresh state.
            assert_eq!(local.push(2).await, Ok(vec![2]));
            supervisor.stop();
            assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
            check_two_incarnations(&trace, $fresh_threads);
        }
    };
}

restart_test!(
    a_supervisor_restarts_a_dedicated_child_that_is_not_send_on_its_thread,
    Dedicated,
    true
);
restart_test!(
    a_supervisor_restarts_a_blocking_child_that_is_not_send_on_its_thread,
    Blocking,
    false
);

/// A supervised child whose factory panics once is restarted: the next incarnation's
/// factory builds it, and the message sent meanwhile is handled by it.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn a_supervisor_restarts_a_child_whose_factory_panicked(context: runtime::Context) {
    let trace = Trace::default();
    let made = trace.clone();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let mut supervisor = Supervisor::new("locals", Strategy::OneForOne);
    let local = supervisor.child(ChildSpec::new(move || {
        if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            panic!("not yet");
        }
        Dedicated::new(made.clone())
    }));
    let supervisor = supervisor.spawn(&context);
    assert_eq!(local.push(1).await, Ok(vec![1]));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
    assert_eq!(events(&trace), ["built", "started", "handled", "dropped"]);
}

/// A dynamic supervisor starts a child that is not `Send` and terminates it; it is dropped
/// on the thread it was built on, which is not the caller's.
#[runtime::test(timeout = "20s")]
async fn a_dynamic_supervisor_runs_a_child_that_is_not_send(context: runtime::Context) {
    let trace = Trace::default();
    let made = trace.clone();
    let supervisor = DynamicSupervisor::new("local_pool").spawn(&context);
    let local = supervisor
        .start_child(ChildSpec::new(move || Blocking::new(made.clone())))
        .await
        .unwrap();
    assert_eq!(local.push(5).await, Ok(vec![5]));
    supervisor.terminate_child(local.id()).await.unwrap();
    assert_eq!(events(&trace), ["built", "started", "handled", "dropped"]);
    let threads = threads(&trace);
    assert_eq!(threads.len(), 1, "{threads:?}");
    assert_ne!(threads[0], thread::current().id());
}

/// A dynamic supervisor refuses a child whose factory panics, with the panic, and does not
/// list it.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn a_dynamic_supervisor_refuses_a_child_whose_factory_panics(context: runtime::Context) {
    let supervisor = DynamicSupervisor::new("local_pool").spawn(&context);
    let refused = supervisor
        .start_child(ChildSpec::new(|| -> Dedicated { panic!("no state today") }))
        .await;
    assert_eq!(
        refused.unwrap_err(),
        actors::Error::Panicked { actor: "dedicated" }
    );
    assert_eq!(supervisor.count(), 0);
    assert_eq!(supervisor.children(), []);
}

/// A factory that panics ends the actor with that panic: its ref's `join` says so. What it
/// had built is dropped by the unwind, on the actor's thread; nothing was started.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn a_panicking_factory_ends_the_actor_with_its_panic(context: runtime::Context) {
    let trace = Trace::default();
    let made = trace.clone();
    let local = Dedicated::spawn_with(&context, move || {
        let _half_built = Dedicated::new(made);
        panic!("no state today")
    });
    assert_eq!(
        local.join().await,
        ExitReason::Panicked("no state today".to_string())
    );
    assert_eq!(local.push(1).await, Err(actors::Error::Closed));
    assert_eq!(events(&trace), ["built", "dropped"]);
    let threads = threads(&trace);
    assert_eq!(threads.len(), 1, "{threads:?}");
    assert_ne!(threads[0], thread::current().id());
}

/// A spawn the runtime refuses (its scope has ended) never calls the factory, and the actor
/// ends at once: its `join` resolves, its asks are refused.
#[runtime::test(timeout = "20s")]
async fn a_refused_spawn_never_calls_the_factory(context: runtime::Context) {
    let ended_scope = context
        .clone()
        .spawn(|scope| async move { scope })
        .await
        .unwrap();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let trace = Trace::default();
    let local = Dedicated::spawn_with(&ended_scope, move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Dedicated::new(trace)
    });
    assert_eq!(local.join().await, ExitReason::Shutdown);
    assert_eq!(local.push(1).await, Err(actors::Error::Closed));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
}
