//! The request table: a request's frame queued with a reply subject under the client's
//! inbox, the entry its reply resolves, the inbox's one wildcard subscription, and the
//! entry's removal however the request ends.

use super::outgoing::wait_for_room;
use super::{Delivery, Held, PendingRequest, Shared, State, Status, Subscriber, wake};
use crate::Error;
use crate::protocol::{Encoder, Message};
use futures::channel::oneshot;
use std::future::poll_fn;
use std::task::Poll;

impl Shared {
    /// Queues a request (waiting for room in the write buffer) and waits for its reply,
    /// without a timeout of its own.
    pub(crate) async fn request(&self, subject: &str, payload: &[u8]) -> Result<Message, Error> {
        let mut waiting = None;
        poll_fn(|cx| {
            let mut state = self.lock();
            self.ensure_responses(&mut state);
            let token = state.next_token;
            let reply = format!("{}.{token}", self.inbox_prefix);
            let start = state.out.len();
            match self.enqueue(&mut state, subject, Some(&reply), None, payload) {
                Err(Error::WouldBlock) => {
                    wait_for_room(&mut state, cx.waker());
                    Poll::Pending
                }
                Err(error) => Poll::Ready(Err(error)),
                Ok(()) => {
                    if state.status == Status::Reconnecting {
                        let end = state.out.len();
                        state.held.push(Held { start, end, token });
                    }
                    state.next_token += 1;
                    let (sender, answer) = oneshot::channel();
                    state.requests.insert(
                        token,
                        PendingRequest {
                            subject: subject.to_string(),
                            reply: sender,
                        },
                    );
                    waiting = Some((token, answer));
                    wake(state.writer.take());
                    Poll::Ready(Ok(()))
                }
            }
        })
        .await?;
        let (token, answer) = waiting.expect("queued");
        // However this future ends (answered, timed out, dropped), the entry goes.
        let mut forget = ForgetRequest {
            shared: self,
            token,
            answered: false,
        };
        let answer = answer.await;
        forget.answered = true;
        answer.unwrap_or(Err(Error::Closed))
    }

    /// Requests waiting for their reply now.
    pub(crate) fn pending_requests(&self) -> usize {
        self.lock().requests.len()
    }

    /// Subscribes the client's reply inbox once.
    fn ensure_responses(&self, state: &mut State) {
        if state.response_sid.is_some() || state.status == Status::Closed {
            return;
        }
        let sid = state.next_sid;
        state.next_sid += 1;
        state.response_sid = Some(sid);
        let subject = format!("{}.*", self.inbox_prefix);
        if state.status == Status::Connected {
            let _ = Encoder::new(&mut state.out).subscribe(&subject, None, sid);
        }
        state.subscriptions.insert(
            sid,
            Subscriber {
                subject,
                queue_group: None,
                delivery: Delivery::Responses,
                max: None,
                delivered: 0,
                delivered_here: 0,
                draining: false,
            },
        );
    }
}

/// Removes a request's entry when its future ends without the answer (timed out, dropped).
struct ForgetRequest<'a> {
    shared: &'a Shared,
    token: u64,
    answered: bool,
}

impl Drop for ForgetRequest<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.shared.lock().requests.remove(&self.token);
        }
    }
}
