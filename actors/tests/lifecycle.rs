//! An actor's life through the public API: ids, the exit reason of every way of ending (as
//! `join`, `stop` and `on_stop` see it), stop and join from many refs before and after the
//! end, weak refs, and `actor_exits_total`.

use actors::prelude::*;
use actors::supervisor::{ChildSpec, Strategy, Supervisor};
use actors::{ActorId, Context, Error, ExitReason};
use futures::channel::oneshot;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

type Journal = Arc<Mutex<Vec<String>>>;

/// An actor that can end every way there is, and writes what it does to a journal.
#[actor(mailbox = 8)]
struct Probe {
    journal: Journal,
    fail_on_start: bool,
    /// Holds the actor's own weak ref: it must not keep the actor alive.
    myself: Option<actors::WeakRef<Probe>>,
}

#[actor]
impl Probe {
    fn on_start(&mut self, ctx: &mut Context<Self>) {
        self.myself = Some(ctx.weak_ref());
        assert!(!self.fail_on_start, "probe fails to start");
    }

    fn on_stop(&mut self, reason: &ExitReason) {
        self.journal.lock().push(format!("on_stop: {reason}"));
    }

    fn record(&mut self, entry: u32) {
        self.journal.lock().push(entry.to_string());
    }

    fn finish(&mut self, ctx: &mut Context<Self>) {
        ctx.stop();
    }

    fn fail(&mut self) {
        panic!("probe fails");
    }

    /// Waits for `release`: holds the actor in a handler while the test fills its mailbox.
    async fn hold(&mut self, release: oneshot::Receiver<()>) {
        let _ = release.await;
    }

    /// Never returns: a handler that ignores a stop request.
    async fn hang(&mut self) {
        futures::future::pending::<()>().await;
    }

    fn link_to(&mut self, ctx: &mut Context<Self>, other: ProbeRef) {
        ctx.link(&other);
    }

    fn ping(&self) -> ActorId {
        self.myself.as_ref().expect("set on start").id()
    }
}

fn probe(journal: &Journal) -> Probe {
    Probe {
        journal: journal.clone(),
        fail_on_start: false,
        myself: None,
    }
}

fn last(journal: &Journal) -> Option<String> {
    journal.lock().last().cloned()
}

/// Every ref has the actor's id, shown `label#n`, distinct per actor and the same through
/// clones, weak refs and the actor's own context.
#[runtime::test(timeout = "20s")]
async fn ids_name_each_actor_once(context: runtime::Context) {
    let journal = Journal::default();
    let first = probe(&journal).spawn(&context);
    let second = probe(&journal).spawn(&context);
    assert_ne!(first.id(), second.id());
    assert_eq!(first.clone().id(), first.id());
    assert_eq!(first.downgrade().id(), first.id());
    assert_eq!(first.ping().await, Ok(first.id()), "the context's weak ref");
    let shown = first.id().to_string();
    assert_eq!(shown, format!("probe#{}", first.id().serial()));
    assert_eq!(first.id().label(), "probe");
}

/// How one way of ending is brought about, and the reason it must give.
struct Case {
    name: &'static str,
    expected: fn(&ProbeRef) -> ExitReason,
    /// Whether `on_stop` runs (all but an abort).
    on_stop_runs: bool,
}

/// Every stop path gives its reason, to `join`, to a concurrent `stop` from another ref and to
/// `on_stop`: a handler's `ctx.stop()` and the last ref's drop are `Normal`, a ref's `stop()`
/// and a supervisor's stop are `Stopped`, a panic in a handler or in `on_start` is
/// `Panicked` with its message, an ended scope or an abort past the shutdown timeout is
/// `Shutdown` (without `on_stop`), and a linked actor's panic is `Linked` with its reason.
#[runtime::test(timeout = "30s", catch_panics = true)]
async fn every_stop_path_gives_its_reason(context: runtime::Context) {
    let cases = [
        Case {
            name: "ctx.stop()",
            expected: |_| ExitReason::Normal,
            on_stop_runs: true,
        },
        Case {
            name: "last ref dropped",
            expected: |_| ExitReason::Normal,
            on_stop_runs: true,
        },
        Case {
            name: "ref stop()",
            expected: |_| ExitReason::Stopped,
            on_stop_runs: true,
        },
        Case {
            name: "handler panic",
            expected: |_| ExitReason::Panicked("probe fails".to_string()),
            on_stop_runs: true,
        },
        Case {
            name: "on_start panic",
            expected: |_| ExitReason::Panicked("probe fails to start".to_string()),
            on_stop_runs: true,
        },
        Case {
            name: "scope ended",
            expected: |_| ExitReason::Shutdown,
            on_stop_runs: false,
        },
        Case {
            name: "supervisor stop",
            expected: |_| ExitReason::Stopped,
            on_stop_runs: true,
        },
        Case {
            name: "supervisor abort past the shutdown timeout",
            expected: |_| ExitReason::Shutdown,
            on_stop_runs: false,
        },
        Case {
            name: "linked actor panicked",
            expected: |_| ExitReason::Normal, // replaced below: it names the partner
            on_stop_runs: true,
        },
    ];
    for case in cases {
        let journal = Journal::default();
        // `held` is a strong ref kept until the end is seen: a last-ref drop would race
        // with the way of ending under test (a link signal arrives after the partner's ask
        // failed, so dropping the last ref in between could end the probe `Normal`).
        let (probe_ref, expected, held) = match case.name {
            "ctx.stop()" => {
                let probe = probe(&journal).spawn(&context);
                probe.tell_finish().await.unwrap();
                (probe.downgrade(), (case.expected)(&probe), Some(probe))
            }
            "last ref dropped" => {
                let probe = probe(&journal).spawn(&context);
                probe.record(1).await.unwrap();
                let weak = probe.downgrade();
                let expected = (case.expected)(&probe);
                drop(probe);
                (weak, expected, None)
            }
            "ref stop()" => {
                let probe = probe(&journal).spawn(&context);
                let other = probe.clone();
                assert_eq!(other.stop().await, ExitReason::Stopped);
                (probe.downgrade(), (case.expected)(&probe), Some(probe))
            }
            "handler panic" => {
                let probe = probe(&journal).spawn(&context);
                assert_eq!(probe.fail().await, Err(Error::Panicked { actor: "probe" }));
                (probe.downgrade(), (case.expected)(&probe), Some(probe))
            }
            "on_start panic" => {
                let mut failing = probe(&journal);
                failing.fail_on_start = true;
                let probe = failing.spawn(&context);
                (probe.downgrade(), (case.expected)(&probe), Some(probe))
            }
            "scope ended" => {
                let (made, made_ref) = oneshot::channel();
                let (release, released) = oneshot::channel::<()>();
                let journal = journal.clone();
                let parent = context.clone().spawn(move |context| async move {
                    let _ = made.send(probe(&journal).spawn(&context));
                    let _ = released.await;
                });
                let probe = made_ref.await.unwrap();
                probe.record(1).await.unwrap();
                parent.abort();
                drop(release);
                let _ = parent.await;
                (probe.downgrade(), (case.expected)(&probe), Some(probe))
            }
            "supervisor stop" | "supervisor abort past the shutdown timeout" => {
                let mut supervisor = Supervisor::new("probes", Strategy::OneForOne);
                let journal = journal.clone();
                let patience = if case.name == "supervisor stop" {
                    Duration::from_secs(30)
                } else {
                    Duration::ZERO
                };
                let probe = supervisor
                    .child(ChildSpec::new(move || probe(&journal)).shutdown_timeout(patience));
                let supervisor = supervisor.spawn(&context);
                probe.record(1).await.unwrap();
                if case.name != "supervisor stop" {
                    probe.tell_hang().await.unwrap();
                }
                supervisor.stop();
                assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
                (probe.downgrade(), (case.expected)(&probe), Some(probe))
            }
            "linked actor panicked" => {
                let partner = probe(&Journal::default()).spawn(&context);
                let probe = probe(&journal).spawn(&context);
                probe.link_to(partner.clone()).await.unwrap();
                assert!(partner.fail().await.is_err());
                let expected = ExitReason::Linked {
                    partner: partner.id(),
                    reason: Box::new(ExitReason::Panicked("probe fails".to_string())),
                };
                (probe.downgrade(), expected, Some(probe))
            }
            other => unreachable!("{other}"),
        };
        let probe = probe_ref;
        assert_eq!(probe.join().await, expected, "{}: join", case.name);
        if let Some(strong) = probe.upgrade() {
            panic!("{}: an ended actor upgrades to {strong:?}", case.name);
        }
        drop(held);
        let on_stop = format!("on_stop: {expected}");
        if case.on_stop_runs {
            assert_eq!(last(&journal), Some(on_stop), "{}: on_stop", case.name);
        } else {
            assert!(
                !journal.lock().contains(&on_stop),
                "{}: on_stop ran",
                case.name
            );
        }
    }
}

/// `stop()` waits for what was queued before it (even in a full mailbox, which it does not
/// wait on), resolves only once `on_stop` finished, and, from several refs at once, gives
/// each the same reason; `join()` from other refs resolves with it too; after the end, both
/// resolve at once with the same reason.
#[runtime::test(timeout = "20s")]
async fn stop_and_join_from_many_refs_before_and_after_the_end(context: runtime::Context) {
    let journal = Journal::default();
    let probe = probe(&journal).spawn(&context);
    let (release, released) = oneshot::channel();
    probe.tell_hold(released).await.unwrap();
    // Fill the mailbox behind the held handler.
    let mut sent = 0;
    while probe.try_record(sent).is_ok() {
        sent += 1;
    }
    assert!(sent > 0);
    assert!(journal.lock().is_empty(), "the handler holds the actor");
    let joins: Vec<_> = (0..3)
        .map(|_| {
            let join = probe.clone().join();
            context.clone().spawn(move |_| join)
        })
        .collect();
    let stops: Vec<_> = (0..2)
        .map(|_| {
            let stop = probe.clone().stop();
            context.clone().spawn(move |_| stop)
        })
        .collect();
    release.send(()).unwrap();
    for waiter in joins.into_iter().chain(stops) {
        assert_eq!(waiter.await.unwrap(), ExitReason::Stopped);
    }
    let mut expected: Vec<String> = (0..sent).map(|entry| entry.to_string()).collect();
    expected.push(format!("on_stop: {}", ExitReason::Stopped));
    assert_eq!(
        *journal.lock(),
        expected,
        "every queued message, then on_stop"
    );
    assert_eq!(probe.stop().await, ExitReason::Stopped);
    assert_eq!(probe.join().await, ExitReason::Stopped);
    assert_eq!(probe.record(1).await, Err(Error::Closed));
}

/// A weak ref does not keep its actor alive (nor does the actor's own, from its context);
/// it upgrades while the actor runs, not after, and never panics once the actor is gone.
#[runtime::test(timeout = "20s")]
async fn weak_refs_do_not_keep_an_actor_alive(context: runtime::Context) {
    let journal = Journal::default();
    let probe = probe(&journal).spawn(&context);
    let weak = probe.downgrade();
    let upgraded = weak.upgrade().expect("it runs");
    upgraded.record(7).await.unwrap();
    drop(upgraded);
    drop(probe);
    assert_eq!(weak.join().await, ExitReason::Normal);
    assert!(weak.upgrade().is_none());
    assert_eq!(weak.clone().join().await, ExitReason::Normal);
    assert_eq!(
        *journal.lock(),
        ["7".to_string(), format!("on_stop: {}", ExitReason::Normal)]
    );
}

/// Each incarnation's end is counted by label and reason in `actor_exits_total`.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn exits_are_counted_by_reason(context: runtime::Context) {
    #[actor(name = "counted")]
    struct Counted;

    #[actor]
    impl Counted {
        fn finish(&mut self, ctx: &mut Context<Self>) {
            ctx.stop();
        }

        fn fail(&mut self) {
            panic!("counted fails");
        }
    }

    let normal = Counted.spawn(&context);
    normal.tell_finish().await.unwrap();
    assert_eq!(normal.join().await, ExitReason::Normal);
    for _ in 0..2 {
        let failing = Counted.spawn(&context);
        let _ = failing.fail().await;
        assert!(matches!(failing.join().await, ExitReason::Panicked(_)));
    }
    let stopped = Counted.spawn(&context);
    assert_eq!(stopped.stop().await, ExitReason::Stopped);
    let exposition = context.encode();
    for (reason, count) in [("normal", 1), ("panicked", 2), ("stopped", 1)] {
        let line = format!("actor_exits_total{{actor=\"counted\",reason=\"{reason}\"}} {count}");
        assert!(
            exposition.lines().any(|candidate| candidate == line),
            "no `{line}` in:\n{exposition}"
        );
    }
}
