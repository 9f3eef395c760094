//! The subscription table: subscribing (the `SUB` queued only when connected: a new
//! connection replays the table), unsubscribing, and limits counted across reconnects.

use super::{Delivery, Shared, Status, Subscriber, wake};
use crate::Error;
use crate::protocol::Encoder;
use crate::queue::Queue;
use bytes::BytesMut;
use std::sync::Arc;

impl Shared {
    /// Adds a subscription to `subject` (in `queue_group`, if any): its id, and the queue its
    /// messages go to.
    pub(crate) fn subscribe(
        &self,
        subject: &str,
        queue_group: Option<&str>,
    ) -> Result<(u64, Arc<Queue>), Error> {
        let queue = Arc::new(Queue::default());
        let mut state = self.lock();
        if state.status == Status::Closed {
            return Err(Error::Closed);
        }
        let sid = state.next_sid;
        // Checked (and written only if valid) before the table changes.
        let mut frame = BytesMut::new();
        Encoder::new(&mut frame).subscribe(subject, queue_group, sid)?;
        state.next_sid += 1;
        state.subscriptions.insert(
            sid,
            Subscriber {
                subject: subject.to_string(),
                queue_group: queue_group.map(str::to_string),
                delivery: Delivery::Queue(queue.clone()),
                max: None,
                delivered: 0,
                delivered_here: 0,
                draining: false,
            },
        );
        if state.status == Status::Connected {
            state.out.extend_from_slice(&frame);
            wake(state.writer.take());
        }
        drop(state);
        Ok((sid, queue))
    }

    /// Ends subscription `sid` (nothing if it has ended): its queue hands out what it holds
    /// and ends.
    pub(crate) fn unsubscribe(&self, sid: u64) {
        let mut state = self.lock();
        let Some(subscriber) = state.subscriptions.remove(&sid) else {
            return;
        };
        if state.status == Status::Connected && !subscriber.draining {
            Encoder::new(&mut state.out).unsubscribe(sid, None);
            wake(state.writer.take());
        }
        drop(state);
        if let Delivery::Queue(queue) = subscriber.delivery {
            queue.close();
        }
    }

    /// Starts draining subscription `sid`: its `UNSUB` goes out now, and it keeps delivering
    /// what the server routed to it before the `UNSUB` until [`unsubscribe`](Self::unsubscribe)
    /// ends it. Whether there is anything to wait for: not when it had ended, or when the
    /// client is not connected (the server has forgotten it; it ends here and now).
    pub(crate) fn start_drain(&self, sid: u64) -> bool {
        let mut state = self.lock();
        let connected = state.status == Status::Connected;
        let Some(subscriber) = state.subscriptions.get_mut(&sid) else {
            return false;
        };
        if !connected {
            drop(state);
            self.unsubscribe(sid);
            return false;
        }
        if !subscriber.draining {
            subscriber.draining = true;
            Encoder::new(&mut state.out).unsubscribe(sid, None);
            wake(state.writer.take());
        }
        true
    }

    /// Ends subscription `sid` after `count` more messages.
    pub(crate) fn unsubscribe_after(&self, sid: u64, count: u64) -> Result<(), Error> {
        let mut state = self.lock();
        let connected = state.status == Status::Connected;
        let Some(subscriber) = state.subscriptions.get_mut(&sid) else {
            return Err(Error::Closed);
        };
        if subscriber.draining {
            // Its `UNSUB` went out already: the server sends it nothing more.
            return Ok(());
        }
        if count == 0 {
            drop(state);
            self.unsubscribe(sid);
            return Ok(());
        }
        subscriber.max = Some(subscriber.delivered.saturating_add(count));
        // The server counts this connection's deliveries.
        let limit = subscriber.delivered_here.saturating_add(count);
        if connected {
            Encoder::new(&mut state.out).unsubscribe(sid, Some(limit));
            wake(state.writer.take());
        }
        Ok(())
    }
}
