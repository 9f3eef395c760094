//! An ask whose deadline passed leaves no reply channel behind once its message is handled.
//! Alone in its binary: it counts the process's reply channels, which other tests would move.

use actors::Error;
use actors::prelude::*;
use futures::channel::oneshot;
use std::time::Duration;

#[actor]
struct Held;

#[actor]
impl Held {
    async fn hold(&mut self, gate: oneshot::Receiver<()>) {
        let _ = gate.await;
    }

    fn value(&self) -> u64 {
        7
    }
}

#[runtime::test(timeout = "20s")]
async fn timed_out_asks_leave_no_reply_slot(context: runtime::Context) {
    let Some(before) = actors::__live_reply_slots() else {
        // A release build does not count reply channels: nothing to compare.
        return;
    };
    let held = Held.spawn(&context);
    let (open, gate) = oneshot::channel();
    held.tell_hold(gate).await.unwrap();
    for _ in 0..10 {
        let asked = held.value().timeout(Duration::from_millis(5)).await;
        assert_eq!(asked, Err(Error::Timeout));
    }
    // Ten asks queued behind `hold`, their askers gone: their channels wait for the replies.
    assert_eq!(actors::__live_reply_slots(), Some(before + 10));
    open.send(()).unwrap();
    // Handled in order: once this ask is answered, the ten before it were too.
    assert_eq!(held.value().await, Ok(7));
    // The actor's end follows its last reply's release of the channel (a sender lets go of
    // it after waking its asker, on the actor's thread).
    assert!(held.stop().await.is_normal());
    assert_eq!(actors::__live_reply_slots(), Some(before));
}
