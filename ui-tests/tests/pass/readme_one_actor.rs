//! The README's "One actor, explained", kept compiling (and running) here.

use actors::prelude::*;
use actors::supervisor::{ChildSpec, Strategy, Supervisor};
use std::time::Duration;

#[actor(dedicated, mailbox = 128)] // a thread of its own; at most 128 messages queued
struct Counter {
    total: u64,
}

#[actor]
impl Counter {
    async fn on_start(&mut self) {} // optional hooks: on_start, on_stop

    async fn add(&mut self, by: u64) -> u64 {
        self.total += by;
        self.total
    }

    fn total(&self) -> u64 {
        self.total
    }

    fn reset(&mut self, ctx: &mut actors::Context<Self>) {
        self.total = 0;
        ctx.stop(); // stops after this message
    }
}

#[runtime::main]
async fn main(context: runtime::Context) -> Result<(), actors::Error> {
    let counter = Counter { total: 0 }.spawn(&context);
    assert_eq!(counter.add(2).await?, 2);
    counter.tell_add(3).await?;
    counter.try_add(1)?;
    assert_eq!(counter.total().await?, 6);
    counter.reset().await?;
    assert_eq!(counter.total().await, Err(actors::Error::Closed));

    let mut supervisor = Supervisor::new("counters", Strategy::OneForOne)
        .intensity(3, Duration::from_secs(5)); // more restarts than that: escalate
    let counter = supervisor.child(ChildSpec::new(|| Counter { total: 0 }));
    let supervisor = supervisor.spawn(&context);
    counter.add(1).await?;
    // A permanent child that stops itself is restarted; its ref reaches the new one.
    counter.reset().await?;
    assert_eq!(counter.total().await?, 0);
    supervisor.stop();
    supervisor.join().await?;

    let counter = Counter { total: 0 }.spawn(&context);
    assert_eq!(counter.id().to_string(), format!("counter#{}", counter.id().serial()));
    assert_eq!(counter.stop().await, actors::ExitReason::Stopped);
    assert_eq!(counter.join().await, actors::ExitReason::Stopped);

    use actors::supervisor::{DynamicSupervisor, Restart};

    let sessions = DynamicSupervisor::new("sessions").max_children(10_000).spawn(&context);
    let counter = sessions
        .start_child(ChildSpec::new(|| Counter { total: 0 }).restart(Restart::Temporary))
        .await?; // Error::TooManyChildren past max_children
    sessions.terminate_child(counter.id()).await?; // Error::NoSuchChild for an unknown id
    assert_eq!(sessions.count(), 0);
    Ok(())
}
