use actors::prelude::*;

#[actor]
struct Trapper;

#[actor]
impl Trapper {
    async fn on_link_exit(
        &mut self,
        ctx: &mut actors::Context<Self>,
        id: actors::ActorId,
        reason: &actors::ExitReason,
    ) {
        let _ = (ctx, id, reason);
    }
}

fn main() {}
