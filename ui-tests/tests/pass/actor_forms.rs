//! Every accepted form of `#[actor]`: each placement and option, sync and async handlers on
//! `&self` and `&mut self`, with and without the context, both hooks, associated functions
//! left alone, replies of every shape, and refs used through each of their methods.

use actors::prelude::*;
use actors::{Context, Error};

/// On the pool, with defaults.
#[actor]
pub struct Plain {
    count: u32,
}

#[actor]
impl Plain {
    /// Not a handler: no receiver.
    pub fn new() -> Self {
        Plain { count: 0 }
    }

    fn bump(&mut self) {
        self.count += 1;
    }

    fn count(&self) -> u32 {
        self.count
    }

    async fn add_later(&mut self, by: u32) -> u32 {
        runtime::reschedule().await;
        self.count += by;
        self.count
    }

    fn pair(&self, a: u8, b: String) -> (u8, String) {
        (a, b)
    }

    fn checked(&self, ok: bool) -> Result<u8, String> {
        if ok { Ok(1) } else { Err("no".into()) }
    }

    fn with_context(&self, ctx: &mut Context<Self>) -> &'static str {
        ctx.label()
    }

    async fn async_with_context(&mut self, ctx: &mut Context<Self>, stop: bool) {
        if stop {
            ctx.stop();
        }
    }
}

#[actor(dedicated, mailbox = 128, name = "own_thread")]
struct OnThread;

#[actor]
impl OnThread {
    async fn on_start(&mut self, ctx: &mut Context<Self>) {
        let _ = ctx.runtime();
    }

    fn on_stop(&mut self) {}

    fn ping(&self) {}
}

#[actor(blocking)]
struct MayBlock;

#[actor]
impl MayBlock {
    fn on_start(&mut self) {}

    async fn on_stop(&mut self, ctx: &mut Context<Self>) {
        let _ = ctx.label();
    }
}

#[actor(mailbox = 1, dedicated)]
struct Tiny;

#[actor]
impl Tiny {}

fn main() {
    runtime::Runner::new(runtime::Config::default()).start(|context| async move {
        let plain: PlainRef = Plain::new().spawn(&context);
        plain.bump().await.unwrap();
        plain.tell_bump().await.unwrap();
        plain.try_bump().unwrap();
        assert_eq!(plain.count().await, Ok(3));
        assert_eq!(plain.add_later(2).await, Ok(5));
        assert_eq!(plain.pair(1, "b".into()).await, Ok((1, "b".to_string())));
        assert_eq!(plain.checked(false).await, Ok(Err("no".to_string())));
        assert_eq!(plain.with_context().await, Ok("plain"));
        plain.async_with_context(true).await.unwrap();
        assert_eq!(plain.count().await, Err(Error::Closed));

        let on_thread = OnThread.spawn(&context);
        on_thread.ping().await.unwrap();
        let _may_block: MayBlockRef = MayBlock.spawn(&context);
        let tiny = Tiny.spawn(&context);
        assert_eq!(tiny.inner().capacity(), 1);
    });
}
