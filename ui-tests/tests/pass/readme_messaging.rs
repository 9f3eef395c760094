//! The README's "Deadlines, delegated replies, timers, streams, generic actors" block.
use actors::prelude::*;
use actors::{Context, Reply};
use std::time::Duration;

#[actor(ask_timeout = "5s")]
struct Front {
    store: StoreRef<String>,
    hits: u64,
}

#[actor]
impl Front {
    fn on_start(&mut self, ctx: &mut Context<Self>) {
        ctx.run_every(Duration::from_secs(1), |this, _| this.hits = 0);
    }

    async fn lookup(&mut self, key: String, reply: Reply<Option<String>>) {
        self.hits += 1;
        let _ = self.store.forward_get(key, reply).await;
    }
}

#[actor]
struct Store<V: Clone + Send + 'static> {
    value: Option<V>,
}

#[actor]
impl<V: Clone + Send + 'static> Store<V> {
    fn get(&self, _key: String) -> Option<V> {
        self.value.clone()
    }
}

fn main() {
    runtime::Runner::new(runtime::Config::default()).start(|context| async move {
        let store = Store {
            value: Some("v".to_string()),
        }
        .spawn(&context);
        let front = Front { store, hits: 0 }.spawn(&context);
        let answer = front
            .lookup("k".into())
            .timeout(Duration::from_millis(500))
            .await;
        assert_eq!(answer, Ok(Some("v".to_string())));
    });
}
