//! Topics, pools and registry lookups against kameo (with `kameo_actors`) and ractor (both
//! on tokio `multi_thread` with 2 workers), alternating frameworks sample by sample:
//!
//! - `topic_100_subscribers_100k`: 100k publishes of a `u64` to a topic with 100
//!   subscribers, timed until every subscriber has every message (ours: a `Topic` that waits
//!   for room; kameo: `kameo_actors`' `PubSub` actor with guaranteed delivery, published to
//!   with `tell`; ractor: an `OutputPort`);
//! - `pool_8_tell_1m`: 1M tells through a pool of 8 workers, timed until all are handled
//!   (ours: a `Pool` routing round-robin; kameo: `kameo_actors`' `ActorPool`, which routes
//!   to the least busy; ractor: a factory with round-robin routing);
//! - `registry_lookup_1m`: 1M lookups of a registered name, from two tasks at once (ours:
//!   `Registry::lookup`; kameo: `ActorRef::lookup`; ractor: `registry::where_is`).
//!
//! Each handler adds its argument to a total. `BENCH_FILTER=<text>` keeps matching rows,
//! `BENCH_SAMPLES=<n>` changes the samples (default 5), `BENCH_ONLY=ours|kameo|ractor` runs
//! one framework.

use actors::prelude::*;
use actors::{Pool, Registry, Topic, WhenFull};
use benches::{FrameworkRow, RatioColumn};
use kameo::actor::Spawn as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const SUBSCRIBERS: usize = 100;
const PUBLISHES: u64 = 100_000;
const POOL: usize = 8;
const POOL_TELLS: u64 = 1_000_000;
const LOOKUPS: u64 = 1_000_000;

// ---------------------------------------------------------------- ours

#[actor]
struct Sum {
    total: u64,
}

#[actor]
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

fn ours_topic() -> Duration {
    ours(|context| {
        Box::pin(async move {
            let topic = Topic::new(&context, "bench", WhenFull::Wait);
            let sums: Vec<_> = (0..SUBSCRIBERS)
                .map(|_| Sum { total: 0 }.spawn(&context))
                .collect();
            for sum in &sums {
                topic.subscribe(sum.add_recipient());
            }
            let start = Instant::now();
            for _ in 0..PUBLISHES {
                topic.publish(1).await;
            }
            for sum in &sums {
                assert_eq!(sum.total().await.unwrap(), PUBLISHES);
            }
            start.elapsed()
        })
    })
}

fn ours_pool() -> Duration {
    ours(|context| {
        Box::pin(async move {
            let pool: SumPoolRef = Pool::new("bench", POOL, || Sum { total: 0 })
                .spawn(&context)
                .await
                .unwrap()
                .into();
            let start = Instant::now();
            for _ in 0..POOL_TELLS {
                pool.tell_add(1).await.unwrap();
            }
            let mut total = 0;
            for member in pool.as_pool().all() {
                total += member.total().await.unwrap();
            }
            let elapsed = start.elapsed();
            assert_eq!(total, POOL_TELLS);
            pool.as_pool().stop().await;
            elapsed
        })
    })
}

fn ours_registry() -> Duration {
    ours(|context| {
        Box::pin(async move {
            let registry = Registry::of(&context);
            let sum = Sum { total: 0 }.spawn(&context);
            registry.register("sum", &sum).unwrap();
            let start = Instant::now();
            let tasks: Vec<_> = (0..2)
                .map(|_| {
                    let registry = registry.clone();
                    context.clone().spawn(move |_| async move {
                        for _ in 0..LOOKUPS / 2 {
                            assert!(registry.lookup::<SumRef>("sum").is_some());
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            start.elapsed()
        })
    })
}

// ---------------------------------------------------------------- kameo

#[derive(kameo::Actor)]
struct KameoSum {
    total: u64,
}

#[derive(Clone)]
struct Add(u64);
struct Total;

impl kameo::message::Message<Add> for KameoSum {
    type Reply = ();

    async fn handle(&mut self, Add(by): Add, _: &mut kameo::message::Context<Self, ()>) {
        self.total += by;
    }
}

impl kameo::message::Message<Total> for KameoSum {
    type Reply = u64;

    async fn handle(&mut self, _: Total, _: &mut kameo::message::Context<Self, u64>) -> u64 {
        self.total
    }
}

fn kameo_topic() -> Duration {
    benches::tokio_multi(2, async {
        use kameo_actors::pubsub::{PubSub, Publish, Subscribe};
        let pubsub = PubSub::<Add>::spawn(PubSub::new(kameo_actors::DeliveryStrategy::Guaranteed));
        let sums: Vec<_> = (0..SUBSCRIBERS)
            .map(|_| KameoSum::spawn(KameoSum { total: 0 }))
            .collect();
        for sum in &sums {
            pubsub.ask(Subscribe(sum.clone())).await.unwrap();
        }
        let start = Instant::now();
        for _ in 0..PUBLISHES {
            pubsub.tell(Publish(Add(1))).await.unwrap();
        }
        for sum in &sums {
            while sum.ask(Total).await.unwrap() < PUBLISHES {
                tokio::task::yield_now().await;
            }
        }
        start.elapsed()
    })
}

/// A kameo pool worker counting into a shared total (the pool hides which worker ran).
#[derive(kameo::Actor)]
struct KameoCounted {
    total: Arc<AtomicU64>,
}

impl kameo::message::Message<Add> for KameoCounted {
    type Reply = ();

    async fn handle(&mut self, Add(by): Add, _: &mut kameo::message::Context<Self, ()>) {
        self.total.fetch_add(by, Ordering::Relaxed);
    }
}

fn kameo_pool() -> Duration {
    benches::tokio_multi(2, async {
        use kameo_actors::pool::{ActorPool, Dispatch};
        let total = Arc::new(AtomicU64::new(0));
        let counted = total.clone();
        let pool = ActorPool::spawn(ActorPool::new(POOL, move || {
            KameoCounted::spawn(KameoCounted {
                total: counted.clone(),
            })
        }));
        let start = Instant::now();
        for _ in 0..POOL_TELLS {
            pool.tell(Dispatch(Add(1))).await.unwrap();
        }
        while total.load(Ordering::Relaxed) < POOL_TELLS {
            tokio::task::yield_now().await;
        }
        start.elapsed()
    })
}

fn kameo_registry() -> Duration {
    benches::tokio_multi(2, async {
        let sum = KameoSum::spawn(KameoSum { total: 0 });
        // The registry is process-wide: one name per sample.
        static SAMPLE: AtomicU64 = AtomicU64::new(0);
        let name: &'static str =
            Box::leak(format!("sum{}", SAMPLE.fetch_add(1, Ordering::Relaxed)).into_boxed_str());
        sum.register(name).unwrap();
        let start = Instant::now();
        let tasks: Vec<_> = (0..2)
            .map(|_| {
                tokio::spawn(async move {
                    for _ in 0..LOOKUPS / 2 {
                        assert!(
                            kameo::actor::ActorRef::<KameoSum>::lookup(name)
                                .unwrap()
                                .is_some()
                        );
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        start.elapsed()
    })
}

// ---------------------------------------------------------------- ractor

struct RactorSum;

enum RactorMessage {
    Add(u64),
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
            RactorMessage::Total(reply) => {
                let _ = reply.send(*total);
            }
        }
        Ok(())
    }
}

async fn ractor_total(sum: &ractor::ActorRef<RactorMessage>) -> u64 {
    match sum.call(RactorMessage::Total, None).await.unwrap() {
        ractor::rpc::CallResult::Success(total) => total,
        _ => panic!("ractor call failed"),
    }
}

fn ractor_topic() -> Duration {
    benches::tokio_multi(2, async {
        let mut sums = Vec::new();
        for _ in 0..SUBSCRIBERS {
            let (sum, _) = ractor::Actor::spawn(None, RactorSum, ()).await.unwrap();
            sums.push(sum);
        }
        let start = Instant::now();
        for _ in 0..PUBLISHES {
            // A publish to each subscriber: ractor's `OutputPort` drops messages once ten are
            // in flight (a broadcast channel of ten), so it cannot carry this workload.
            for sum in &sums {
                sum.send_message(RactorMessage::Add(1)).unwrap();
            }
        }
        for sum in &sums {
            assert_eq!(ractor_total(sum).await, PUBLISHES);
        }
        start.elapsed()
    })
}

/// A ractor factory worker counting into a shared total.
struct RactorCounted {
    total: Arc<AtomicU64>,
}

impl ractor::factory::Worker for RactorCounted {
    type Key = ();
    type Message = u64;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ractor::factory::WorkerId,
        _: &ractor::factory::FactoryRef<(), u64>,
        _: (),
    ) -> Result<(), ractor::ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _: ractor::factory::WorkerId,
        _: &ractor::factory::FactoryRef<(), u64>,
        job: ractor::factory::Job<(), u64>,
        _: &mut (),
    ) -> Result<(), ractor::ActorProcessingErr> {
        self.total.fetch_add(job.msg, Ordering::Relaxed);
        let () = job.key;
        Ok(())
    }
}

fn ractor_pool() -> Duration {
    benches::tokio_multi(2, async {
        use ractor::factory::{Factory, FactoryArguments, queues, routing, worker_builder};
        let total = Arc::new(AtomicU64::new(0));
        let counted = total.clone();
        let factory = Factory::<
            (),
            u64,
            (),
            RactorCounted,
            routing::RoundRobinRouting<(), u64>,
            queues::DefaultQueue<(), u64>,
        >::default();
        let arguments = FactoryArguments::builder()
            .worker_builder(Box::new(worker_builder(move |_| {
                (
                    RactorCounted {
                        total: counted.clone(),
                    },
                    (),
                )
            })))
            .queue(Default::default())
            .router(Default::default())
            .num_initial_workers(POOL)
            .build();
        let (factory, _) = ractor::Actor::spawn(None, factory, arguments)
            .await
            .unwrap();
        let start = Instant::now();
        for _ in 0..POOL_TELLS {
            factory.dispatch((), 1).unwrap();
        }
        while total.load(Ordering::Relaxed) < POOL_TELLS {
            tokio::task::yield_now().await;
        }
        let elapsed = start.elapsed();
        factory.stop(None);
        elapsed
    })
}

fn ractor_registry() -> Duration {
    benches::tokio_multi(2, async {
        static SAMPLE: AtomicU64 = AtomicU64::new(0);
        let name = format!("sum{}", SAMPLE.fetch_add(1, Ordering::Relaxed));
        let (sum, _) = ractor::Actor::spawn(Some(name.clone()), RactorSum, ())
            .await
            .unwrap();
        let start = Instant::now();
        let tasks: Vec<_> = (0..2)
            .map(|_| {
                let name = name.clone();
                tokio::spawn(async move {
                    for _ in 0..LOOKUPS / 2 {
                        assert!(ractor::registry::where_is(name.clone()).is_some());
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let elapsed = start.elapsed();
        sum.stop(None);
        elapsed
    })
}

// ---------------------------------------------------------------- harness

type Row = FrameworkRow<3>;

fn main() {
    let rows = [
        Row {
            name: "topic_100_subscribers_100k",
            runs: [ours_topic, kameo_topic, ractor_topic],
        },
        Row {
            name: "pool_8_tell_1m",
            runs: [ours_pool, kameo_pool, ractor_pool],
        },
        Row {
            name: "registry_lookup_1m",
            runs: [ours_registry, kameo_registry, ractor_registry],
        },
    ];
    benches::run_frameworks(
        &rows,
        ["ours", "kameo", "ractor"],
        &[RatioColumn {
            title: "best of kameo, ractor / ours",
            peers: &[1, 2],
        }],
        1,
        3,
    );
}
