//! Memory per idle actor: heap bytes live after spawning 10k actors that each handled one
//! ask and now wait for messages, minus those live before, divided by 10k. Counted by a
//! global allocator that tracks live bytes, so the figure is what the frameworks allocate
//! (task, mailbox, state), not what the allocator rounds it to. Ours, kameo, ractor (tokio,
//! 2 workers) and actix.

use actix::prelude::{Actor as _, Handler as ActixHandler, Message as ActixMessage};
use actors::prelude::*;
use kameo::actor::Spawn as _;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

const ACTORS: usize = 10_000;

/// The system allocator, counting live bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` with the same arguments; the counter is only
// bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        LIVE.fetch_add(size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.realloc(pointer, layout, size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

#[actor]
struct Idle {
    value: u64,
}

#[actor]
impl Idle {
    fn value(&self) -> u64 {
        self.value
    }
}

fn ours() -> isize {
    let config = runtime::Config::default().with_worker_threads(2);
    let storage = config.storage_directory().clone();
    let bytes = runtime::Runner::new(config).start(|context| async move {
        let before = live();
        let actors: Vec<_> = (0..ACTORS)
            .map(|value| {
                Idle {
                    value: value as u64,
                }
                .spawn(&context)
            })
            .collect();
        for actor in &actors {
            actor.value().await.unwrap();
        }
        live() - before
    });
    let _ = std::fs::remove_dir_all(storage);
    bytes
}

/// The runtime's part: a bare task waiting on a channel, spawned directly or in a child
/// scope (what an actor's task is).
fn runtime_task(in_child_scope: bool) -> isize {
    use futures::channel::oneshot;
    let config = runtime::Config::default().with_worker_threads(2);
    let storage = config.storage_directory().clone();
    let bytes = runtime::Runner::new(config).start(|context| async move {
        let before = live();
        let mut gates = Vec::with_capacity(ACTORS);
        for _ in 0..ACTORS {
            let (open, gate) = oneshot::channel::<()>();
            let spawner = if in_child_scope {
                context.child("idle")
            } else {
                context.clone()
            };
            drop(spawner.spawn(move |_| async move {
                let _ = gate.await;
            }));
            gates.push(open);
        }
        runtime::reschedule().await;
        let bytes =
            live() - before - (ACTORS * std::mem::size_of::<oneshot::Sender<()>>()) as isize;
        drop(gates);
        bytes
    });
    let _ = std::fs::remove_dir_all(storage);
    bytes
}

#[derive(kameo::Actor)]
struct KameoIdle {
    value: u64,
}

struct Value;

impl kameo::message::Message<Value> for KameoIdle {
    type Reply = u64;

    async fn handle(&mut self, _: Value, _: &mut kameo::message::Context<Self, u64>) -> u64 {
        self.value
    }
}

fn kameo() -> isize {
    benches::tokio_multi(2, async {
        let before = live();
        let actors: Vec<_> = (0..ACTORS)
            .map(|value| {
                KameoIdle::spawn(KameoIdle {
                    value: value as u64,
                })
            })
            .collect();
        for actor in &actors {
            actor.ask(Value).await.unwrap();
        }
        live() - before
    })
}

struct RactorIdle;

impl ractor::Actor for RactorIdle {
    type Msg = ractor::RpcReplyPort<u64>;
    type State = u64;
    type Arguments = u64;

    async fn pre_start(
        &self,
        _: ractor::ActorRef<Self::Msg>,
        value: u64,
    ) -> Result<u64, ractor::ActorProcessingErr> {
        Ok(value)
    }

    async fn handle(
        &self,
        _: ractor::ActorRef<Self::Msg>,
        reply: Self::Msg,
        value: &mut u64,
    ) -> Result<(), ractor::ActorProcessingErr> {
        let _ = reply.send(*value);
        Ok(())
    }
}

fn ractor() -> isize {
    benches::tokio_multi(2, async {
        let before = live();
        let mut actors = Vec::with_capacity(ACTORS);
        for value in 0..ACTORS {
            let (actor, _) = ractor::Actor::spawn(None, RactorIdle, value as u64)
                .await
                .unwrap();
            actors.push(actor);
        }
        for actor in &actors {
            actor.call(|reply| reply, None).await.unwrap();
        }
        live() - before
    })
}

struct ActixIdle {
    value: u64,
}

impl actix::Actor for ActixIdle {
    type Context = actix::Context<Self>;
}

struct ActixValue;

impl ActixMessage for ActixValue {
    type Result = u64;
}

impl ActixHandler<ActixValue> for ActixIdle {
    type Result = u64;

    fn handle(&mut self, _: ActixValue, _: &mut actix::Context<Self>) -> u64 {
        self.value
    }
}

fn actix() -> isize {
    actix::System::new().block_on(async {
        let before = live();
        let actors: Vec<_> = (0..ACTORS)
            .map(|value| {
                ActixIdle {
                    value: value as u64,
                }
                .start()
            })
            .collect();
        for actor in &actors {
            actor.send(ActixValue).await.unwrap();
        }
        live() - before
    })
}

fn main() {
    println!("| framework | bytes per idle actor |");
    println!("|---|---:|");
    for (name, measure) in [
        ("ours", ours as fn() -> isize),
        ("kameo", kameo),
        ("ractor", ractor),
        ("actix", actix),
        ("(our runtime: a bare task)", || runtime_task(false)),
        ("(our runtime: a bare task in a child scope)", || {
            runtime_task(true)
        }),
    ] {
        measure();
        let bytes = measure();
        println!("| {name} | {} |", bytes / ACTORS as isize);
    }
}
