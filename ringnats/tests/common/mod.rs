//! What the client tests share: a server when `nats-server` is installed, and the client's
//! events as a stream.

#![allow(dead_code)]

use futures::StreamExt;
use futures::channel::mpsc;
use ringnats::server::{Server, ServerBuilder};
use ringnats::{Event, Options};
use runtime::Context;
use runtime::prelude::*;
use std::time::Duration;

/// A started server, or `None` (the test skips) when `nats-server` is not installed and
/// `.ci/run` did not require it (`REQUIRE_NATS_SERVER`).
pub fn server(builder: ServerBuilder) -> Option<Server> {
    builder.start_or_skip()
}

/// The client's events, in order.
pub struct Events(mpsc::UnboundedReceiver<Event>);

/// Options for `url` that report events, with quick reconnects and pings for tests.
pub fn options(url: &str) -> (Options, Events) {
    let (sender, receiver) = mpsc::unbounded();
    let options = Options::new([url])
        .unwrap()
        .with_reconnect_delay(Duration::from_millis(5), Duration::from_millis(100))
        .on_event(move |event| {
            let _ = sender.unbounded_send(event);
        });
    (options, Events(receiver))
}

impl Events {
    /// The next event that `wanted` accepts, skipping others; fails the test after 20 s.
    pub async fn wait_for(
        &mut self,
        context: &Context,
        what: &str,
        wanted: impl Fn(&Event) -> bool + Send + Sync,
    ) -> Event {
        let found = context
            .timeout(Duration::from_secs(20), async {
                while let Some(event) = self.0.next().await {
                    if wanted(&event) {
                        return Some(event);
                    }
                }
                None
            })
            .await;
        match found {
            Ok(Some(event)) => event,
            other => panic!("no {what} event: {other:?}"),
        }
    }

    /// Events already reported.
    pub fn drain(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        while let Ok(event) = self.0.try_recv() {
            events.push(event);
        }
        events
    }
}
