//! Actors against kameo, ractor (both on tokio `multi_thread` with 2 workers) and actix (its
//! own single-threaded system), same workloads, alternating frameworks sample by sample:
//!
//! - `tell_1m_one`: 1M tells to one actor, then one ask that returns once all were handled;
//! - `tell_1m_round_robin_100`: 1M tells spread over 100 actors in turn, then an ask to each;
//! - `ask_100k`: 100k sequential asks to one actor;
//! - `ask_100k_erased`: the same through a ref that hides the actor's type (ours: an
//!   `#[interface]` ref; kameo: a `ReplyRecipient`; ractor: a `DerivedActorRef`, answering
//!   on an `RpcReplyPort` as `call` does; actix: a `Recipient`);
//! - `ask_100k_deadline`: the same, each with a 5 s deadline (ours: `.timeout(..)`; kameo:
//!   `reply_timeout`; ractor: `call` with a timeout, as `call_t!` expands; actix:
//!   `send(..).timeout(..)`);
//! - `delegated_100k`: 100k sequential asks to a front actor that hands each reply to a
//!   second actor, which answers (ours: a `Reply<R>` handler and `forward_`; kameo:
//!   `DelegatedReply` with its `ReplySender` told to the second actor; ractor: the
//!   `RpcReplyPort` cast to it; actix has no delegated reply, and is left out);
//! - `spawn_10k`: spawn 10k actors and get one reply from each (they are running);
//! - `spawn_10k_supervised`: the same, each started under one supervisor (ours: a
//!   `DynamicSupervisor`'s `start_child`; ractor: `spawn_linked` under a supervisor actor;
//!   kameo: `spawn_link` to a supervisor actor); the supervisor is stopped after the clock
//!   stops (ractor's and kameo's graceful stops leave their children running, ours stops
//!   them: timing it would compare unlike work);
//! - `monitor_10k_stop`: one watcher monitors 10k actors (ours: `ctx.monitor`; ractor: it
//!   supervises them, counting `ActorTerminated`; kameo: they are linked to it, counting
//!   `on_link_died`); timed from asking all 10k to stop until the watcher has every
//!   notification.
//!
//! Each handler adds its argument to a `u64`. Memory per idle actor is measured by the
//! `actors_memory` binary. `BENCH_FILTER=<text>` keeps matching rows, `BENCH_SAMPLES=<n>`
//! changes the samples, `BENCH_ONLY=ours|kameo|ractor|actix` runs one framework.

use actix::prelude::{Actor as _, Handler as ActixHandler, Message as ActixMessage};
use actors::prelude::*;
use benches::{FrameworkRow, NOT_COMPARABLE, RatioColumn};
use kameo::actor::Spawn as _;
use std::time::{Duration, Instant};

const TELLS: u64 = 1_000_000;
const ACTORS: usize = 100;
const ASKS: u64 = 100_000;
const SPAWNS: usize = 10_000;
/// The deadline of each ask in `ask_100k_deadline`: never reached.
const DEADLINE: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------- ours

#[actor]
struct Sum {
    total: u64,
}

/// What `ask_100k_erased` asks through: any actor that adds.
#[interface]
pub trait Adds {
    fn add_one(&mut self, by: u64);
}

#[actor]
impl Adds for Sum {
    fn add_one(&mut self, by: u64) {
        self.total += by;
    }
}

#[actor(implements(Adds))]
impl Sum {
    fn add(&mut self, by: u64) {
        self.total += by;
    }

    fn total(&self) -> u64 {
        self.total
    }
}

fn ours(
    workload: fn(runtime::Context) -> std::pin::Pin<Box<dyn Future<Output = Duration>>>,
) -> Duration {
    benches::ours(2, workload)
}

fn ours_tell_one() -> Duration {
    ours(|context| {
        Box::pin(async move {
            let start = Instant::now();
            let sum = Sum { total: 0 }.spawn(&context);
            for _ in 0..TELLS {
                sum.tell_add(1).await.unwrap();
            }
            assert_eq!(sum.total().await.unwrap(), TELLS);
            start.elapsed()
        })
    })
}

fn ours_tell_round_robin() -> Duration {
    ours(|context| {
        Box::pin(async move {
            let start = Instant::now();
            let sums: Vec<_> = (0..ACTORS)
                .map(|_| Sum { total: 0 }.spawn(&context))
                .collect();
            for i in 0..TELLS {
                sums[i as usize % ACTORS].tell_add(1).await.unwrap();
            }
            for sum in &sums {
                assert_eq!(sum.total().await.unwrap(), TELLS / ACTORS as u64);
            }
            start.elapsed()
        })
    })
}

fn ours_ask() -> Duration {
    ours(|context| {
        Box::pin(async move {
            let sum = Sum { total: 0 }.spawn(&context);
            let start = Instant::now();
            for _ in 0..ASKS {
                sum.add(1).await.unwrap();
            }
            let elapsed = start.elapsed();
            assert_eq!(sum.total().await.unwrap(), ASKS);
            elapsed
        })
    })
}

fn ours_ask_erased() -> Duration {
    ours(|context| {
        Box::pin(async move {
            let sum = Sum { total: 0 }.spawn(&context);
            let adds = AddsRef::from(sum.clone());
            let start = Instant::now();
            for _ in 0..ASKS {
                adds.add_one(1).await.unwrap();
            }
            let elapsed = start.elapsed();
            assert_eq!(sum.total().await.unwrap(), ASKS);
            elapsed
        })
    })
}

fn ours_ask_deadline() -> Duration {
    ours(|context| {
        Box::pin(async move {
            let sum = Sum { total: 0 }.spawn(&context);
            let start = Instant::now();
            for _ in 0..ASKS {
                sum.add(1).timeout(DEADLINE).await.unwrap();
            }
            let elapsed = start.elapsed();
            assert_eq!(sum.total().await.unwrap(), ASKS);
            elapsed
        })
    })
}

#[actor]
struct Front {
    back: BackRef,
}

#[actor]
impl Front {
    async fn add(&mut self, by: u64, reply: actors::Reply<u64>) {
        self.back.forward_add(by, reply).await.unwrap();
    }
}

#[actor]
struct Back {
    total: u64,
}

#[actor]
impl Back {
    fn add(&mut self, by: u64) -> u64 {
        self.total += by;
        self.total
    }
}

fn ours_delegated() -> Duration {
    ours(|context| {
        Box::pin(async move {
            let back = Back { total: 0 }.spawn(&context);
            let front = Front { back }.spawn(&context);
            let start = Instant::now();
            for _ in 0..ASKS {
                front.add(1).await.unwrap();
            }
            let elapsed = start.elapsed();
            assert_eq!(front.add(0).await.unwrap(), ASKS);
            elapsed
        })
    })
}

fn ours_spawn() -> Duration {
    ours(|context| {
        Box::pin(async move {
            let start = Instant::now();
            let sums: Vec<_> = (0..SPAWNS)
                .map(|_| Sum { total: 0 }.spawn(&context))
                .collect();
            for sum in &sums {
                sum.total().await.unwrap();
            }
            start.elapsed()
        })
    })
}

fn ours_spawn_supervised() -> Duration {
    use actors::supervisor::{ChildSpec, DynamicSupervisor, Restart};
    ours(|context| {
        Box::pin(async move {
            let start = Instant::now();
            let supervisor = DynamicSupervisor::new("bench_sums").spawn(&context);
            let mut sums = Vec::with_capacity(SPAWNS);
            for _ in 0..SPAWNS {
                let spec = ChildSpec::new(|| Sum { total: 0 }).restart(Restart::Temporary);
                sums.push(supervisor.start_child(spec).await.unwrap());
            }
            for sum in &sums {
                sum.total().await.unwrap();
            }
            let elapsed = start.elapsed();
            supervisor.stop();
            assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
            elapsed
        })
    })
}

/// Counts down notifications; tells `done` at `expected`.
#[actor(mailbox = 1024)]
struct Watcher {
    seen: usize,
    expected: usize,
    done: Option<futures::channel::oneshot::Sender<()>>,
}

#[actor]
impl Watcher {
    fn watch(&mut self, ctx: &mut actors::Context<Self>, sum: SumRef) {
        let _ = ctx.monitor(&sum);
    }

    fn on_down(&mut self, _: actors::ActorId, _: actors::ExitReason) {
        self.seen += 1;
        if self.seen == self.expected
            && let Some(done) = self.done.take()
        {
            let _ = done.send(());
        }
    }
}

fn ours_monitor_stop() -> Duration {
    ours(|context| {
        Box::pin(async move {
            let (done, all_down) = futures::channel::oneshot::channel();
            let watcher = Watcher {
                seen: 0,
                expected: SPAWNS,
                done: Some(done),
            }
            .spawn(&context);
            let sums: Vec<_> = (0..SPAWNS)
                .map(|_| Sum { total: 0 }.spawn(&context))
                .collect();
            for sum in &sums {
                watcher.watch(sum.clone()).await.unwrap();
            }
            let start = Instant::now();
            for sum in &sums {
                drop(sum.stop());
            }
            all_down.await.unwrap();
            start.elapsed()
        })
    })
}

// ---------------------------------------------------------------- kameo

#[derive(kameo::Actor)]
struct KameoSum {
    total: u64,
}

struct Add(u64);
struct Total;

impl kameo::message::Message<Add> for KameoSum {
    type Reply = ();

    async fn handle(&mut self, Add(by): Add, _: &mut kameo::message::Context<Self, Self::Reply>) {
        self.total += by;
    }
}

impl kameo::message::Message<Total> for KameoSum {
    type Reply = u64;

    async fn handle(
        &mut self,
        _: Total,
        _: &mut kameo::message::Context<Self, Self::Reply>,
    ) -> u64 {
        self.total
    }
}

fn kameo_tell_one() -> Duration {
    benches::tokio_multi(2, async {
        let start = Instant::now();
        let sum = KameoSum::spawn(KameoSum { total: 0 });
        for _ in 0..TELLS {
            sum.tell(Add(1)).await.unwrap();
        }
        assert_eq!(sum.ask(Total).await.unwrap(), TELLS);
        start.elapsed()
    })
}

fn kameo_tell_round_robin() -> Duration {
    benches::tokio_multi(2, async {
        let start = Instant::now();
        let sums: Vec<_> = (0..ACTORS)
            .map(|_| KameoSum::spawn(KameoSum { total: 0 }))
            .collect();
        for i in 0..TELLS {
            sums[i as usize % ACTORS].tell(Add(1)).await.unwrap();
        }
        for sum in &sums {
            assert_eq!(sum.ask(Total).await.unwrap(), TELLS / ACTORS as u64);
        }
        start.elapsed()
    })
}

fn kameo_ask() -> Duration {
    benches::tokio_multi(2, async {
        let sum = KameoSum::spawn(KameoSum { total: 0 });
        let start = Instant::now();
        for _ in 0..ASKS {
            sum.ask(Add(1)).await.unwrap();
        }
        let elapsed = start.elapsed();
        assert_eq!(sum.ask(Total).await.unwrap(), ASKS);
        elapsed
    })
}

fn kameo_ask_erased() -> Duration {
    benches::tokio_multi(2, async {
        let sum = KameoSum::spawn(KameoSum { total: 0 });
        let adds = sum.clone().reply_recipient::<Add>();
        let start = Instant::now();
        for _ in 0..ASKS {
            adds.ask(Add(1)).await.unwrap();
        }
        let elapsed = start.elapsed();
        assert_eq!(sum.ask(Total).await.unwrap(), ASKS);
        elapsed
    })
}

fn kameo_ask_deadline() -> Duration {
    benches::tokio_multi(2, async {
        let sum = KameoSum::spawn(KameoSum { total: 0 });
        let start = Instant::now();
        for _ in 0..ASKS {
            sum.ask(Add(1)).reply_timeout(DEADLINE).await.unwrap();
        }
        let elapsed = start.elapsed();
        assert_eq!(sum.ask(Total).await.unwrap(), ASKS);
        elapsed
    })
}

#[derive(kameo::Actor)]
struct KameoFront {
    back: kameo::actor::ActorRef<KameoBack>,
}

#[derive(kameo::Actor)]
struct KameoBack {
    total: u64,
}

struct Delegate(u64);
struct Answer(u64, kameo::reply::ReplySender<u64>);

impl kameo::message::Message<Delegate> for KameoFront {
    type Reply = kameo::reply::DelegatedReply<u64>;

    async fn handle(
        &mut self,
        Delegate(by): Delegate,
        ctx: &mut kameo::message::Context<Self, Self::Reply>,
    ) -> Self::Reply {
        let (delegated, sender) = ctx.reply_sender();
        if let Some(sender) = sender {
            self.back.tell(Answer(by, sender)).await.unwrap();
        }
        delegated
    }
}

impl kameo::message::Message<Answer> for KameoBack {
    type Reply = ();

    async fn handle(
        &mut self,
        Answer(by, reply): Answer,
        _: &mut kameo::message::Context<Self, Self::Reply>,
    ) {
        self.total += by;
        reply.send(self.total);
    }
}

fn kameo_delegated() -> Duration {
    benches::tokio_multi(2, async {
        let back = KameoBack::spawn(KameoBack { total: 0 });
        let front = KameoFront::spawn(KameoFront { back });
        let start = Instant::now();
        for _ in 0..ASKS {
            front.ask(Delegate(1)).await.unwrap();
        }
        let elapsed = start.elapsed();
        assert_eq!(front.ask(Delegate(0)).await.unwrap(), ASKS);
        elapsed
    })
}

fn kameo_spawn() -> Duration {
    benches::tokio_multi(2, async {
        let start = Instant::now();
        let sums: Vec<_> = (0..SPAWNS)
            .map(|_| KameoSum::spawn(KameoSum { total: 0 }))
            .collect();
        for sum in &sums {
            sum.ask(Total).await.unwrap();
        }
        start.elapsed()
    })
}

/// A kameo supervisor that counts its links' deaths and tells `done` at `expected`.
struct KameoWatcher {
    seen: usize,
    expected: usize,
    done: Option<tokio::sync::oneshot::Sender<()>>,
}

impl kameo::Actor for KameoWatcher {
    type Args = Self;
    type Error = std::convert::Infallible;

    async fn on_start(
        state: Self::Args,
        _: kameo::actor::ActorRef<Self>,
    ) -> Result<Self, Self::Error> {
        Ok(state)
    }

    async fn on_link_died(
        &mut self,
        _: kameo::actor::WeakActorRef<Self>,
        _: kameo::actor::ActorId,
        _: kameo::error::ActorStopReason,
    ) -> Result<std::ops::ControlFlow<kameo::error::ActorStopReason>, Self::Error> {
        self.seen += 1;
        if self.seen == self.expected
            && let Some(done) = self.done.take()
        {
            let _ = done.send(());
        }
        Ok(std::ops::ControlFlow::Continue(()))
    }
}

fn kameo_spawn_supervised() -> Duration {
    benches::tokio_multi(2, async {
        let start = Instant::now();
        let supervisor = KameoWatcher::spawn(KameoWatcher {
            seen: 0,
            expected: usize::MAX,
            done: None,
        });
        let mut sums = Vec::with_capacity(SPAWNS);
        for _ in 0..SPAWNS {
            sums.push(KameoSum::spawn_link(&supervisor, KameoSum { total: 0 }).await);
        }
        for sum in &sums {
            sum.ask(Total).await.unwrap();
        }
        let elapsed = start.elapsed();
        supervisor.stop_gracefully().await.unwrap();
        supervisor.wait_for_shutdown().await;
        elapsed
    })
}

fn kameo_monitor_stop() -> Duration {
    benches::tokio_multi(2, async {
        let (done, all_down) = tokio::sync::oneshot::channel();
        let watcher = KameoWatcher::spawn(KameoWatcher {
            seen: 0,
            expected: SPAWNS,
            done: Some(done),
        });
        let mut sums = Vec::with_capacity(SPAWNS);
        for _ in 0..SPAWNS {
            sums.push(KameoSum::spawn_link(&watcher, KameoSum { total: 0 }).await);
        }
        let start = Instant::now();
        for sum in &sums {
            sum.stop_gracefully().await.unwrap();
        }
        all_down.await.unwrap();
        start.elapsed()
    })
}

// ---------------------------------------------------------------- ractor

struct RactorSum;

enum RactorMessage {
    Add(u64),
    AddAndReply(u64, ractor::RpcReplyPort<()>),
    Total(ractor::RpcReplyPort<u64>),
}

impl ractor::Actor for RactorSum {
    type Msg = RactorMessage;
    type State = u64;
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ractor::ActorRef<RactorMessage>,
        _: (),
    ) -> Result<u64, ractor::ActorProcessingErr> {
        Ok(0)
    }

    async fn handle(
        &self,
        _: ractor::ActorRef<RactorMessage>,
        message: RactorMessage,
        total: &mut u64,
    ) -> Result<(), ractor::ActorProcessingErr> {
        match message {
            RactorMessage::Add(by) => *total += by,
            RactorMessage::AddAndReply(by, reply) => {
                *total += by;
                let _ = reply.send(());
            }
            RactorMessage::Total(reply) => {
                let _ = reply.send(*total);
            }
        }
        Ok(())
    }
}

async fn ractor_spawn_one() -> ractor::ActorRef<RactorMessage> {
    let (actor, _) = ractor::Actor::spawn(None, RactorSum, ()).await.unwrap();
    actor
}

async fn ractor_total(actor: &ractor::ActorRef<RactorMessage>) -> u64 {
    match actor.call(RactorMessage::Total, None).await.unwrap() {
        ractor::rpc::CallResult::Success(total) => total,
        _ => panic!("ractor call failed"),
    }
}

fn ractor_tell_one() -> Duration {
    benches::tokio_multi(2, async {
        let start = Instant::now();
        let sum = ractor_spawn_one().await;
        for _ in 0..TELLS {
            sum.cast(RactorMessage::Add(1)).unwrap();
        }
        assert_eq!(ractor_total(&sum).await, TELLS);
        start.elapsed()
    })
}

fn ractor_tell_round_robin() -> Duration {
    benches::tokio_multi(2, async {
        let start = Instant::now();
        let mut sums = Vec::with_capacity(ACTORS);
        for _ in 0..ACTORS {
            sums.push(ractor_spawn_one().await);
        }
        for i in 0..TELLS {
            sums[i as usize % ACTORS]
                .cast(RactorMessage::Add(1))
                .unwrap();
        }
        for sum in &sums {
            assert_eq!(ractor_total(sum).await, TELLS / ACTORS as u64);
        }
        start.elapsed()
    })
}

fn ractor_ask() -> Duration {
    benches::tokio_multi(2, async {
        let sum = ractor_spawn_one().await;
        let start = Instant::now();
        for _ in 0..ASKS {
            sum.call(|reply| RactorMessage::AddAndReply(1, reply), None)
                .await
                .unwrap();
        }
        let elapsed = start.elapsed();
        assert_eq!(ractor_total(&sum).await, ASKS);
        elapsed
    })
}

/// What ractor's derived ref of `ask_100k_erased` sends: the subset of `RactorMessage` that
/// adds and replies.
struct RactorAdd(u64, ractor::RpcReplyPort<()>);

impl From<RactorAdd> for RactorMessage {
    fn from(RactorAdd(by, reply): RactorAdd) -> Self {
        RactorMessage::AddAndReply(by, reply)
    }
}

impl TryFrom<RactorMessage> for RactorAdd {
    type Error = ();

    fn try_from(message: RactorMessage) -> Result<Self, ()> {
        match message {
            RactorMessage::AddAndReply(by, reply) => Ok(RactorAdd(by, reply)),
            _ => Err(()),
        }
    }
}

fn ractor_ask_erased() -> Duration {
    benches::tokio_multi(2, async {
        let sum = ractor_spawn_one().await;
        let adds: ractor::DerivedActorRef<RactorAdd> = sum.get_derived();
        let start = Instant::now();
        for _ in 0..ASKS {
            // What `call` does, through the derived ref (which has no `call` of its own).
            let (sender, receiver) = ractor::concurrency::oneshot();
            adds.send_message(RactorAdd(1, sender.into())).unwrap();
            receiver.await.unwrap();
        }
        let elapsed = start.elapsed();
        assert_eq!(ractor_total(&sum).await, ASKS);
        elapsed
    })
}

fn ractor_ask_deadline() -> Duration {
    benches::tokio_multi(2, async {
        let sum = ractor_spawn_one().await;
        let start = Instant::now();
        for _ in 0..ASKS {
            // What `call_t!(sum, AddAndReply, DEADLINE, 1)` expands to.
            match sum
                .call(|reply| RactorMessage::AddAndReply(1, reply), Some(DEADLINE))
                .await
                .unwrap()
            {
                ractor::rpc::CallResult::Success(()) => {}
                _ => panic!("ractor call failed"),
            }
        }
        let elapsed = start.elapsed();
        assert_eq!(ractor_total(&sum).await, ASKS);
        elapsed
    })
}

struct RactorFront;

impl ractor::Actor for RactorFront {
    type Msg = ractor::RpcReplyPort<u64>;
    type State = ractor::ActorRef<RactorBackMessage>;
    type Arguments = ractor::ActorRef<RactorBackMessage>;

    async fn pre_start(
        &self,
        _: ractor::ActorRef<Self::Msg>,
        back: Self::Arguments,
    ) -> Result<Self::State, ractor::ActorProcessingErr> {
        Ok(back)
    }

    async fn handle(
        &self,
        _: ractor::ActorRef<Self::Msg>,
        reply: Self::Msg,
        back: &mut Self::State,
    ) -> Result<(), ractor::ActorProcessingErr> {
        back.cast(RactorBackMessage(1, reply))?;
        Ok(())
    }
}

struct RactorBackMessage(u64, ractor::RpcReplyPort<u64>);

struct RactorBack;

impl ractor::Actor for RactorBack {
    type Msg = RactorBackMessage;
    type State = u64;
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ractor::ActorRef<Self::Msg>,
        _: (),
    ) -> Result<u64, ractor::ActorProcessingErr> {
        Ok(0)
    }

    async fn handle(
        &self,
        _: ractor::ActorRef<Self::Msg>,
        RactorBackMessage(by, reply): Self::Msg,
        total: &mut u64,
    ) -> Result<(), ractor::ActorProcessingErr> {
        *total += by;
        let _ = reply.send(*total);
        Ok(())
    }
}

fn ractor_delegated() -> Duration {
    benches::tokio_multi(2, async {
        let (back, _) = ractor::Actor::spawn(None, RactorBack, ()).await.unwrap();
        let (front, _) = ractor::Actor::spawn(None, RactorFront, back).await.unwrap();
        let start = Instant::now();
        let mut last = 0;
        for _ in 0..ASKS {
            match front.call(|reply| reply, None).await.unwrap() {
                ractor::rpc::CallResult::Success(total) => last = total,
                _ => panic!("ractor call failed"),
            }
        }
        let elapsed = start.elapsed();
        assert_eq!(last, ASKS);
        elapsed
    })
}

fn ractor_spawn() -> Duration {
    benches::tokio_multi(2, async {
        let start = Instant::now();
        let mut sums = Vec::with_capacity(SPAWNS);
        for _ in 0..SPAWNS {
            sums.push(ractor_spawn_one().await);
        }
        for sum in &sums {
            ractor_total(sum).await;
        }
        start.elapsed()
    })
}

/// A ractor supervisor that counts its children's terminations and tells `done` at
/// `expected`.
struct RactorWatcher;

type RactorWatcherState = (usize, usize, Option<tokio::sync::oneshot::Sender<()>>);

impl ractor::Actor for RactorWatcher {
    type Msg = ();
    type State = RactorWatcherState;
    type Arguments = RactorWatcherState;

    async fn pre_start(
        &self,
        _: ractor::ActorRef<()>,
        state: RactorWatcherState,
    ) -> Result<RactorWatcherState, ractor::ActorProcessingErr> {
        Ok(state)
    }

    async fn handle_supervisor_evt(
        &self,
        _: ractor::ActorRef<()>,
        event: ractor::SupervisionEvent,
        (seen, expected, done): &mut RactorWatcherState,
    ) -> Result<(), ractor::ActorProcessingErr> {
        if let ractor::SupervisionEvent::ActorTerminated(..) = event {
            *seen += 1;
            if *seen == *expected
                && let Some(done) = done.take()
            {
                let _ = done.send(());
            }
        }
        Ok(())
    }
}

async fn ractor_children(
    supervisor: &ractor::ActorRef<()>,
) -> Vec<ractor::ActorRef<RactorMessage>> {
    let mut sums = Vec::with_capacity(SPAWNS);
    for _ in 0..SPAWNS {
        let (sum, _) = ractor::Actor::spawn_linked(None, RactorSum, (), supervisor.get_cell())
            .await
            .unwrap();
        sums.push(sum);
    }
    sums
}

fn ractor_spawn_supervised() -> Duration {
    benches::tokio_multi(2, async {
        let start = Instant::now();
        let (supervisor, handle) = ractor::Actor::spawn(None, RactorWatcher, (0, usize::MAX, None))
            .await
            .unwrap();
        let sums = ractor_children(&supervisor).await;
        for sum in &sums {
            ractor_total(sum).await;
        }
        let elapsed = start.elapsed();
        supervisor.stop(None);
        handle.await.unwrap();
        elapsed
    })
}

fn ractor_monitor_stop() -> Duration {
    benches::tokio_multi(2, async {
        let (done, all_down) = tokio::sync::oneshot::channel();
        let (watcher, _) = ractor::Actor::spawn(None, RactorWatcher, (0, SPAWNS, Some(done)))
            .await
            .unwrap();
        let sums = ractor_children(&watcher).await;
        let start = Instant::now();
        for sum in &sums {
            sum.stop(None);
        }
        all_down.await.unwrap();
        let elapsed = start.elapsed();
        watcher.stop(None);
        elapsed
    })
}

/// actix has neither a supervisor of dynamic children nor monitors: its column in these rows
/// shows `—`, and the ratios leave it out.
fn actix_not_comparable() -> Duration {
    NOT_COMPARABLE
}

// ---------------------------------------------------------------- actix

struct ActixSum {
    total: u64,
}

impl actix::Actor for ActixSum {
    type Context = actix::Context<Self>;
}

struct ActixAdd(u64);

impl ActixMessage for ActixAdd {
    type Result = ();
}

struct ActixTotal;

impl ActixMessage for ActixTotal {
    type Result = u64;
}

impl ActixHandler<ActixAdd> for ActixSum {
    type Result = ();

    fn handle(&mut self, ActixAdd(by): ActixAdd, _: &mut actix::Context<Self>) {
        self.total += by;
    }
}

impl ActixHandler<ActixTotal> for ActixSum {
    type Result = u64;

    fn handle(&mut self, _: ActixTotal, _: &mut actix::Context<Self>) -> u64 {
        self.total
    }
}

fn actix_run(workload: impl Future<Output = Duration> + 'static) -> Duration {
    actix::System::new().block_on(workload)
}

fn actix_tell_one() -> Duration {
    actix_run(async {
        let start = Instant::now();
        let sum = ActixSum { total: 0 }.start();
        for _ in 0..TELLS {
            // `do_send` ignores the mailbox bound; a bounded tell is `send` without awaiting
            // the reply, which actix does not offer.
            sum.do_send(ActixAdd(1));
        }
        assert_eq!(sum.send(ActixTotal).await.unwrap(), TELLS);
        start.elapsed()
    })
}

fn actix_tell_round_robin() -> Duration {
    actix_run(async {
        let start = Instant::now();
        let sums: Vec<_> = (0..ACTORS).map(|_| ActixSum { total: 0 }.start()).collect();
        for i in 0..TELLS {
            sums[i as usize % ACTORS].do_send(ActixAdd(1));
        }
        for sum in &sums {
            assert_eq!(sum.send(ActixTotal).await.unwrap(), TELLS / ACTORS as u64);
        }
        start.elapsed()
    })
}

fn actix_ask_erased() -> Duration {
    actix_run(async {
        let sum = ActixSum { total: 0 }.start();
        let adds = sum.clone().recipient::<ActixAdd>();
        let start = Instant::now();
        for _ in 0..ASKS {
            adds.send(ActixAdd(1)).await.unwrap();
        }
        let elapsed = start.elapsed();
        assert_eq!(sum.send(ActixTotal).await.unwrap(), ASKS);
        elapsed
    })
}

fn actix_ask() -> Duration {
    actix_run(async {
        let sum = ActixSum { total: 0 }.start();
        let start = Instant::now();
        for _ in 0..ASKS {
            sum.send(ActixAdd(1)).await.unwrap();
        }
        let elapsed = start.elapsed();
        assert_eq!(sum.send(ActixTotal).await.unwrap(), ASKS);
        elapsed
    })
}

fn actix_ask_deadline() -> Duration {
    actix_run(async {
        let sum = ActixSum { total: 0 }.start();
        let start = Instant::now();
        for _ in 0..ASKS {
            sum.send(ActixAdd(1)).timeout(DEADLINE).await.unwrap();
        }
        let elapsed = start.elapsed();
        assert_eq!(sum.send(ActixTotal).await.unwrap(), ASKS);
        elapsed
    })
}

fn actix_spawn() -> Duration {
    actix_run(async {
        let start = Instant::now();
        let sums: Vec<_> = (0..SPAWNS).map(|_| ActixSum { total: 0 }.start()).collect();
        for sum in &sums {
            sum.send(ActixTotal).await.unwrap();
        }
        start.elapsed()
    })
}

// ---------------------------------------------------------------- table

type Row = FrameworkRow<4>;

fn main() {
    let rows = [
        Row {
            name: "tell_1m_one",
            runs: [
                ours_tell_one,
                kameo_tell_one,
                ractor_tell_one,
                actix_tell_one,
            ],
        },
        Row {
            name: "tell_1m_round_robin_100",
            runs: [
                ours_tell_round_robin,
                kameo_tell_round_robin,
                ractor_tell_round_robin,
                actix_tell_round_robin,
            ],
        },
        Row {
            name: "ask_100k",
            runs: [ours_ask, kameo_ask, ractor_ask, actix_ask],
        },
        Row {
            name: "ask_100k_erased",
            runs: [
                ours_ask_erased,
                kameo_ask_erased,
                ractor_ask_erased,
                actix_ask_erased,
            ],
        },
        Row {
            name: "ask_100k_deadline",
            runs: [
                ours_ask_deadline,
                kameo_ask_deadline,
                ractor_ask_deadline,
                actix_ask_deadline,
            ],
        },
        Row {
            name: "delegated_100k",
            runs: [
                ours_delegated,
                kameo_delegated,
                ractor_delegated,
                actix_not_comparable,
            ],
        },
        Row {
            name: "spawn_10k",
            runs: [ours_spawn, kameo_spawn, ractor_spawn, actix_spawn],
        },
        Row {
            name: "spawn_10k_supervised",
            runs: [
                ours_spawn_supervised,
                kameo_spawn_supervised,
                ractor_spawn_supervised,
                actix_not_comparable,
            ],
        },
        Row {
            name: "monitor_10k_stop",
            runs: [
                ours_monitor_stop,
                kameo_monitor_stop,
                ractor_monitor_stop,
                actix_not_comparable,
            ],
        },
    ];
    benches::run_frameworks(
        &rows,
        ["ours", "kameo", "ractor", "actix"],
        &[
            RatioColumn {
                title: "best of kameo, ractor / ours",
                peers: &[1, 2],
            },
            RatioColumn {
                title: "best of all peers / ours",
                peers: &[1, 2, 3],
            },
        ],
        1,
        7,
    );
}
