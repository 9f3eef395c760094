//! The write buffer: frames queued for the writer in order, publishers waiting for room
//! below the high-water mark, and the `PING`s whose `PONG`s answer flushes and keepalives.

use super::{Shared, State, Status, wake};
use crate::Error;
use crate::protocol::Encoder;
use bytes::BytesMut;
use futures::channel::oneshot;
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// What [`Client::publish_urgent`](crate::Client::publish_urgent) may queue past the
/// high-water mark.
const URGENT_RESERVE: usize = 64 * 1024;

/// Registers a publisher waiting for room, once.
pub(super) fn wait_for_room(state: &mut State, waker: &Waker) {
    if !state.room.iter().any(|known| known.will_wake(waker)) {
        state.room.push(waker.clone());
    }
}

impl Shared {
    /// Queues a control frame written by `encode` and wakes the writer (control frames never
    /// wait for room).
    pub(crate) fn queue_control(&self, encode: impl FnOnce(&mut Encoder<'_>)) {
        let mut state = self.lock();
        if state.status == Status::Closed {
            return;
        }
        encode(&mut Encoder::new(&mut state.out));
        wake(state.writer.take());
    }

    /// Queues a keepalive `PING` unless `max_out` are unanswered already (then false: the
    /// connection is stale).
    pub(crate) fn keepalive(&self, max_out: usize) -> bool {
        let mut state = self.lock();
        if state.pings_unanswered >= max_out {
            return false;
        }
        state.pings_unanswered += 1;
        state.pongs.push_back(None);
        Encoder::new(&mut state.out).ping();
        wake(state.writer.take());
        true
    }

    /// A `PONG` arrived: it answers the oldest `PING`.
    pub(crate) fn pong(&self) {
        let flush = {
            let mut state = self.lock();
            state.pings_unanswered = 0;
            state.pongs.pop_front().flatten()
        };
        if let Some(flush) = flush {
            let _ = flush.send(Ok(()));
        }
    }

    /// The writer's next batch: everything queued, swapped with `spare` (an empty buffer
    /// with capacity) so the next frames need no allocation. `None` once the connection of
    /// `generation` is gone.
    pub(crate) fn poll_batch(
        &self,
        cx: &mut std::task::Context<'_>,
        generation: u64,
        spare: &mut BytesMut,
    ) -> Poll<Option<BytesMut>> {
        let mut state = self.lock();
        if state.generation != generation || state.status != Status::Connected {
            return Poll::Ready(None);
        }
        if state.out.is_empty() {
            state.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        std::mem::swap(&mut state.out, spare);
        let room = std::mem::take(&mut state.room);
        drop(state);
        for waker in room {
            waker.wake();
        }
        Poll::Ready(Some(std::mem::take(spare)))
    }

    /// Queues one message, or says why it cannot. `Err(WouldBlock)` only when connected and
    /// above the high-water mark.
    pub(super) fn enqueue(
        &self,
        state: &mut State,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&[u8]>,
        payload: &[u8],
    ) -> Result<(), Error> {
        self.enqueue_within(state, subject, reply, headers, payload, true)
    }

    /// [`enqueue`](Self::enqueue), ignoring the high-water mark unless `bounded`.
    fn enqueue_within(
        &self,
        state: &mut State,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&[u8]>,
        payload: &[u8],
        bounded: bool,
    ) -> Result<(), Error> {
        let size = headers.map_or(0, <[u8]>::len) + payload.len();
        match state.status {
            Status::Closed => return Err(Error::Closed),
            Status::Connected
                if state.out.len()
                    >= self.options.write_high_water + if bounded { 0 } else { URGENT_RESERVE } =>
            {
                return Err(Error::WouldBlock);
            }
            Status::Connected => {}
            Status::Reconnecting => {
                let limit = self.options.reconnect_buffer;
                if state.out.len() + size > limit {
                    return Err(Error::ReconnectBufferFull { limit });
                }
            }
        }
        let max_payload = state.info.max_payload;
        if size > max_payload {
            return Err(Error::TooLarge { size, max_payload });
        }
        if !state.denied.is_empty() && state.denied.contains(subject) {
            return Err(Error::PermissionDenied {
                operation: "publish".into(),
                subject: subject.to_string(),
            });
        }
        if headers.is_some() && !state.info.headers {
            return Err(Error::Invalid(
                "the server does not support headers (it predates NATS 2.2)".into(),
            ));
        }
        Encoder::new(&mut state.out).publish(subject, reply, headers, payload, max_payload)?;
        Ok(())
    }

    /// Queues a message, waiting while the write buffer is above its high-water mark.
    pub(crate) async fn send(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&[u8]>,
        payload: &[u8],
    ) -> Result<(), Error> {
        poll_fn(|cx| {
            let mut state = self.lock();
            match self.enqueue(&mut state, subject, reply, headers, payload) {
                Err(Error::WouldBlock) => {
                    wait_for_room(&mut state, cx.waker());
                    Poll::Pending
                }
                result => {
                    if result.is_ok() {
                        wake(state.writer.take());
                    }
                    Poll::Ready(result)
                }
            }
        })
        .await
    }

    /// Queues a message without waiting: [`Error::WouldBlock`] above the high-water mark.
    pub(crate) fn try_publish(
        &self,
        subject: &str,
        reply: Option<&str>,
        payload: &[u8],
    ) -> Result<(), Error> {
        let mut state = self.lock();
        self.enqueue(&mut state, subject, reply, None, payload)?;
        wake(state.writer.take());
        Ok(())
    }

    /// Queues a message at once, into the reserve past the high-water mark.
    pub(crate) fn publish_urgent(&self, subject: &str, payload: &[u8]) -> Result<(), Error> {
        let mut state = self.lock();
        self.enqueue_within(&mut state, subject, None, None, payload, false)?;
        wake(state.writer.take());
        Ok(())
    }

    /// Queues a flush's `PING`: the receiver gets the answer of its `PONG`.
    pub(crate) fn queue_flush(&self) -> Result<oneshot::Receiver<Result<(), Error>>, Error> {
        let mut state = self.lock();
        if state.status == Status::Closed {
            return Err(Error::Closed);
        }
        let (sender, answer) = oneshot::channel();
        state.pongs.push_back(Some(sender));
        Encoder::new(&mut state.out).ping();
        wake(state.writer.take());
        Ok(answer)
    }
}
