//! Every accepted form of the lifecycle hooks, and the ref methods every actor gets.
use actors::prelude::*;
use actors::{ActorId, Context, ExitReason};

#[actor]
struct Plain;

#[actor]
impl Plain {
    fn on_stop(&mut self, reason: &ExitReason) {
        let _ = reason;
    }

    fn on_down(&mut self, id: ActorId, reason: ExitReason) {
        let _ = (id, reason);
    }
}

#[actor]
struct WithContext;

#[actor]
impl WithContext {
    async fn on_stop(&mut self, ctx: &mut Context<Self>, reason: &actors::ExitReason) {
        let _ = (ctx.id(), reason);
    }

    async fn on_down(&mut self, ctx: &mut Context<Self>, id: actors::ActorId, reason: ExitReason) {
        let _ = (ctx.id(), id, reason);
    }

    fn on_link_exit(&mut self, id: ActorId, reason: ExitReason) {
        let _ = (id, reason);
    }
}

fn main() {
    runtime::Runner::new(runtime::Config::default()).start(|context| async move {
        let plain = Plain.spawn(&context);
        let with_context = WithContext.spawn(&context);
        assert_ne!(plain.id(), with_context.id());
        let weak = plain.downgrade();
        assert!(weak.upgrade().is_some());
        assert_eq!(plain.stop().await, ExitReason::Stopped);
        assert_eq!(with_context.stop().await, ExitReason::Stopped);
        assert_eq!(plain.join().await, ExitReason::Stopped);
    });
}
