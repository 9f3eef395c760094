//! What the connection's reader hands over: each message to its subscription's queue (or to
//! the request its reply answers), and the server's permission denials to what they concern.

use super::{DENIED_SUBJECTS, Delivery, Shared};
use crate::Error;
use crate::options::Event;
use crate::permission::Operation;
use crate::protocol::Message;
use crate::queue::Pushed;

impl Shared {
    /// The server denied `operation` on `subject` (its `Permissions Violation`): fails what
    /// it concerns (see the invariants of `shared`). Subjects are compared as written: a denied
    /// wildcard subscription names its own pattern.
    pub(crate) fn permission_denied(&self, operation: Operation, subject: &str) {
        let denied = || Error::PermissionDenied {
            operation: operation.as_str().into(),
            subject: subject.to_string(),
        };
        let (requests, queues) = {
            let mut state = self.lock();
            match operation {
                Operation::Publish => {
                    if state.denied.len() < DENIED_SUBJECTS {
                        state.denied.insert(subject.to_string());
                    }
                    let tokens: Vec<u64> = state
                        .requests
                        .iter()
                        .filter(|(_, request)| request.subject == subject)
                        .map(|(token, _)| *token)
                        .collect();
                    let requests: Vec<_> = tokens
                        .into_iter()
                        .filter_map(|token| state.requests.remove(&token))
                        .collect();
                    (requests, Vec::new())
                }
                Operation::PublishReply => {
                    let token = subject
                        .strip_prefix(self.inbox_prefix.as_str())
                        .and_then(|rest| rest.strip_prefix('.'))
                        .and_then(|token| token.parse::<u64>().ok());
                    let request = token.and_then(|token| state.requests.remove(&token));
                    (request.into_iter().collect(), Vec::new())
                }
                Operation::Subscribe => {
                    let sids: Vec<u64> = state
                        .subscriptions
                        .iter()
                        .filter(|(_, subscriber)| subscriber.subject == subject)
                        .map(|(sid, _)| *sid)
                        .collect();
                    let mut requests = Vec::new();
                    let mut queues = Vec::new();
                    for sid in sids {
                        let subscriber = state.subscriptions.remove(&sid).expect("listed");
                        match subscriber.delivery {
                            Delivery::Queue(queue) => queues.push(queue),
                            Delivery::Responses => {
                                // No reply can come: the requests fail, and the next
                                // request subscribes the inbox again.
                                state.response_sid = None;
                                requests.extend(state.requests.drain().map(|(_, r)| r));
                            }
                        }
                    }
                    (requests, queues)
                }
            }
        };
        for request in requests {
            let _ = request.reply.send(Err(denied()));
        }
        for queue in queues {
            queue.close_denied(denied());
        }
    }

    /// Hands a message to its subscription (or to the request waiting for it).
    pub(crate) fn dispatch(&self, message: Message) {
        let mut state = self.lock();
        let Some(subscriber) = state.subscriptions.get_mut(&message.sid) else {
            // A message that crossed an UNSUB on the wire.
            return;
        };
        let queue = match &subscriber.delivery {
            Delivery::Responses => {
                let token = message
                    .subject
                    .strip_prefix(self.inbox_prefix.as_str())
                    .and_then(|rest| rest.strip_prefix('.'))
                    .and_then(|token| token.parse::<u64>().ok());
                if let Some(request) = token.and_then(|token| state.requests.remove(&token)) {
                    drop(state);
                    let no_responders = message
                        .headers
                        .as_ref()
                        .is_some_and(|h| h.starts_with(b"NATS/1.0 503"));
                    let _ = request.reply.send(if no_responders {
                        Err(Error::NoResponders {
                            subject: request.subject,
                        })
                    } else {
                        Ok(message)
                    });
                }
                return;
            }
            Delivery::Queue(queue) => queue.clone(),
        };
        subscriber.delivered += 1;
        subscriber.delivered_here += 1;
        let ended = subscriber
            .max
            .is_some_and(|max| subscriber.delivered >= max);
        if ended {
            // The server ended it too (it was told the same limit).
            state.subscriptions.remove(&message.sid);
        }
        drop(state);
        let sid = message.sid;
        let pushed = queue.push(
            message,
            self.options.subscription_capacity,
            self.options.subscription_bytes,
        );
        if ended {
            queue.close();
        }
        if pushed == (Pushed::Dropped { first: true }) {
            // Rare: the subject is looked up again rather than copied for every message.
            let subject = self
                .lock()
                .subscriptions
                .get(&sid)
                .map(|s| s.subject.clone());
            self.emit(Event::SlowConsumer {
                subject: subject.unwrap_or_default(),
                sid,
            });
        }
    }
}
