//! Ask deadlines (the actor's default and per call), delegated replies and forwarding.
use actors::prelude::*;
use actors::{Error, Reply};
use std::time::Duration;

#[actor(ask_timeout = "5s", mailbox = 8)]
struct Front {
    backend: BackendRef,
}

#[actor]
impl Front {
    /// Handed to the backend, which answers the asker.
    async fn lookup(&mut self, key: u64, reply: Reply<u64>) {
        let _ = self.backend.forward_double(key, reply).await;
    }

    /// Answered by a task.
    fn later(&mut self, ctx: &mut actors::Context<Self>, key: u64, reply: Reply<String>) {
        drop(ctx.runtime().clone().spawn(move |_| async move {
            reply.send(key.to_string());
        }));
    }
}

#[actor(ask_timeout = "250ms")]
struct Backend;

#[actor]
impl Backend {
    fn double(&self, key: u64) -> u64 {
        key * 2
    }
}

fn main() {
    runtime::Runner::new(runtime::Config::default()).start(|context| async move {
        let backend = Backend.spawn(&context);
        let front = Front { backend }.spawn(&context);
        let asked: Result<u64, Error> = front.lookup(2).await;
        assert_eq!(asked, Ok(4));
        assert_eq!(front.later(3).timeout(Duration::from_secs(1)).await, Ok("3".to_string()));
        let ask: actors::Ask<'_, Front, u64> = front.lookup(5);
        assert_eq!(ask.timeout(Duration::MAX).await, Ok(10));
    });
}

/// Timers and an attached stream, from hooks and handlers.
#[actor]
struct Ticker {
    ticks: u64,
    timer: Option<actors::Timer>,
}

#[actor]
impl Ticker {
    fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        self.timer = Some(ctx.run_every(Duration::from_millis(10), |this, _| this.ticks += 1));
        ctx.run_after(Duration::from_millis(5), |this, ctx| {
            this.ticks += 100;
            let _ = ctx.id();
        });
        let _attached: actors::Attachment = ctx.attach_with_end(
            futures::stream::iter(0..3_u64),
            |this, _, item| this.ticks += item,
            |_, _| {},
        );
    }

    fn stop_ticking(&mut self) {
        if let Some(timer) = self.timer.take() {
            timer.cancel();
        }
    }
}

#[allow(dead_code)]
fn ticker(context: &runtime::Context) -> TickerRef {
    Ticker {
        ticks: 0,
        timer: None,
    }
    .spawn(context)
}

mod protocol {
    /// A user type named `Reply`: an ordinary argument, not a delegated reply.
    pub struct Reply<T>(pub T);
}

#[actor]
struct Echo;

#[actor]
impl Echo {
    fn echo(&self, message: protocol::Reply<u8>) -> u8 {
        message.0
    }
}
